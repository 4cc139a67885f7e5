"""The ``lemongraph`` group: one table of stream's commands, each loaded from its
module only when it is called or ``--help`` lists it, and the commands other
packages register under the entry-point group ``lemongraph.commands``
(docs/operations.md, "Commands")."""

from __future__ import annotations

import functools
import importlib
import logging
from importlib.metadata import EntryPoint, entry_points

import click

from stream.runtime.config import Settings
from stream.runtime.errors import ConfigError, KafkaUnavailable, ShellError

__all__ = ["COMMANDS", "PLUGINS", "LazyGroup", "main"]

#: stream's own commands: name → "module:attribute".
COMMANDS: dict[str, str] = {
    "bench": "stream.cli.bench:bench",
    "check": "stream.cli.checks:check",
    "dev": "stream.cli.dev:dev",
    "gateway": "stream.cli.services:gateway",
    "memory": "stream.memory.command:memory",
    "replay": "stream.cli.replay:replay",
    "schedule": "stream.cli.schedule:schedule",
    "send-event": "stream.cli.jobs:send_event",
    "simulate": "stream.cli.simulate:simulate",
    "start-job": "stream.cli.jobs:start_job",
    "subject": "stream.cli.subject:subject",
    "tail": "stream.cli.jobs:tail",
    "ticker": "stream.cli.services:ticker",
    "token": "stream.cli.token:token",
    "worker": "stream.cli.services:worker",
}

#: The entry-point group of the commands other packages add (the agents package:
#: ``agents``, ``mail-ingress``, ``flow`` ...; ``[project.entry-points]`` in pyproject.toml).
PLUGINS = "lemongraph.commands"


@functools.cache
def _plugins() -> dict[str, EntryPoint]:
    return {p.name: p for p in entry_points(group=PLUGINS) if p.name not in COMMANDS}


class LazyGroup(click.Group):
    """Loads a command when it is called or listed, and turns the shell's errors
    (``stream/runtime/errors.py``) into one clear line and their exit code
    instead of a traceback."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*COMMANDS, *_plugins(), *self.commands})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name in self.commands:
            return self.commands[cmd_name]
        if cmd_name in COMMANDS:
            module, _, name = COMMANDS[cmd_name].partition(":")
            loaded: object = getattr(importlib.import_module(module), name)
        elif cmd_name in _plugins():
            loaded = _plugins()[cmd_name].load()
        else:
            return None
        if not isinstance(loaded, click.Command):
            raise TypeError(f"lemongraph {cmd_name}: {loaded!r} is not a click command")
        return loaded

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


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="lemongraph")
def main() -> None:
    """lemongraph: a durable decision core for long-horizon agents."""
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    # aiokafka logs every failed connection attempt; the command says it once.
    logging.getLogger("aiokafka").setLevel(logging.CRITICAL)
