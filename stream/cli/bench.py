"""``lemongraph bench``: the engine measured beside its baselines (stream/bench/)."""

from __future__ import annotations

import sys
from collections.abc import Callable
from functools import partial
from pathlib import Path

import click

from stream.cli.common import native
from stream.runtime.command import env_settings, say
from stream.runtime.errors import ExitCode

__all__ = ["bench"]


@click.command()
@click.option("--quick", is_flag=True, help="A smaller run of the same parts (under a minute).")
@click.option(
    "--json",
    "json_path",
    type=click.Path(path_type=Path),
    help="Also write the figures to this file as one JSON object.",
)
@click.option(
    "--scale-out",
    is_flag=True,
    help="Instead: four workers on eight partitions under a steady load, two of them "
    "SIGKILLed and restarted; nothing lost, nothing decided twice, each rebalance's "
    "pause, and CPU per event with two workers against one. Exits 1 when a record "
    "was lost or decided two different ways.",
)
def bench(quick: bool, json_path: Path | None, scale_out: bool) -> None:
    """Measure everything side by side on one broker and print a table: raw
    aiokafka, Faust doing nothing, naive Faust, the engine end to end, latency,
    the pure core, ticks, recovery and memory."""
    configured = env_settings().playbooks_dir
    playbooks = configured if configured.is_dir() else None
    say(native())
    if scale_out:
        _scale_out(quick, json_path, playbooks)
        return
    from stream.bench.run import figures_json, render_table, run_bench

    figures = run_bench(quick, say, playbooks)
    _show(render_table(figures), partial(figures_json, figures), json_path)


def _scale_out(quick: bool, json_path: Path | None, playbooks: Path | None) -> None:
    """``--scale-out``: stream/bench/scaleout.py (benchmarks/README.md, "Scale-out")."""
    from stream.bench.scaleout import run_scale_out
    from stream.bench.scaleout_figures import render_scale_out, scale_out_json

    figures = run_scale_out(quick, say, playbooks)
    _show(render_scale_out(figures), partial(scale_out_json, figures), json_path)
    if figures.failed:
        sys.exit(ExitCode.FAILED)


def _show(table: str, figures: Callable[[], bytes], json_path: Path | None) -> None:
    """Print the table; write the figures' JSON to ``json_path`` when given."""
    click.echo()
    click.echo(table)
    if json_path is not None:
        json_path.write_bytes(figures())
        click.echo(f"figures written to {json_path}")
