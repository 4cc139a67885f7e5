"""The development doubles' commands, registered under the entry-point group
``lemongraph.commands`` (pyproject.toml; docs/operations.md, "Commands"):
``lemongraph standin``, ``demo-tools`` and ``bench-agents``."""

from __future__ import annotations

from pathlib import Path

import click
from stream.runtime.command import env_settings, say
from stream.runtime.errors import ConfigError
from stream.runtime.ports import Listener, check_ports

__all__ = ["bench_agents", "demo_tools", "standin"]


@click.command()
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
    check_ports([Listener(host, port, "the stand-in model", "pass --port")])
    answers = f"script {script}" if script is not None else "built-in policy"
    say(f"standin: http://{host}:{port}/v1 ({answers})")
    uvicorn.run(build_standin(rules), host=host, port=port, log_level="warning")


@click.command("demo-tools")
@click.option("--port", default=8766, show_default=True, type=click.IntRange(0, 65535))
@click.option("--host", default="127.0.0.1", show_default=True)
def demo_tools(port: int, host: str) -> None:
    """Serve demo endpoints for the bundled catalog's tools (calendar, CRM,
    billing): set CALENDAR_URL=http://HOST:PORT/calendar, CRM_URL=.../crm and
    BILLING_URL=.../billing. `lemongraph dev` serves them itself."""
    import uvicorn

    from agents.dev.demo_tools import TOOL_URLS, build_demo_tools

    check_ports([Listener(host, port, "the demo tools", "pass --port")])
    for name, path in TOOL_URLS.items():
        say(f"demo-tools: {name}=http://{host}:{port}{path}")
    uvicorn.run(build_demo_tools(), host=host, port=port, log_level="warning")


@click.command("bench-agents")
@click.option("--jobs", default=1000, show_default=True, type=click.IntRange(1, 100_000))
@click.option(
    "--concurrency",
    default=64,  # LEMONGRAPH_AGENT_CONCURRENCY's default (agents/service/state.py)
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

    settings = env_settings()
    figures = run_agents_bench(jobs, concurrency, say, settings.catalog_file)
    click.echo()
    click.echo(render(figures))
    if json_path is not None:
        json_path.write_bytes(figures_json(figures))
        click.echo(f"figures written to {json_path}")


# -- the agents ----------------------------------------------------------------------------
