"""``lemongraph bench``: the engine measured beside its baselines (stream/bench/)."""

from __future__ import annotations

from pathlib import Path

import click

from stream.cli.common import native
from stream.runtime.command import env_settings, say

__all__ = ["bench"]


@click.command()
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

    configured = env_settings().playbooks_dir
    say(native())
    figures = run_bench(quick, say, configured if configured.is_dir() else None)
    click.echo()
    click.echo(render_table(figures))
    if json_path is not None:
        json_path.write_bytes(figures_json(figures))
        click.echo(f"figures written to {json_path}")
