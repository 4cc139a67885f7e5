"""What ``lemongraph dev`` starts of the agents package, registered under the
entry-point group ``lemongraph.dev`` (pyproject.toml; docs/operations.md,
"Commands"): the mail catcher, the stand-in model (with the scripts of
``LEMONGRAPH_STANDIN_SCRIPT`` and of the flows, docs/agents.md, "The stand-in
model"), the demo tools, and ``lemongraph agents`` and ``lemongraph
mail-ingress`` as child processes."""

from __future__ import annotations

import functools
import os
import secrets
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from stream.runtime.broker import die_with_parent, free_port
from stream.runtime.config import Settings
from stream.runtime.dotenv import read_dotenv
from stream.runtime.errors import ConfigError
from stream.runtime.files import is_standin_script
from stream.runtime.ports import Listener

if TYPE_CHECKING:
    from agents.dev.standin import StandinScript

__all__ = ["DevAgents", "dev_script"]


class DevAgents:
    """The agents' side of ``lemongraph dev`` (``stream/cli/dev.py``, ``DevPart``)."""

    def __init__(self, say: Callable[[str], None]) -> None:
        self.say = say
        self.smtp_url: str | None = None
        self.stops: list[Callable[[], None]] = []

    def listeners(self, settings: Settings) -> list[Listener]:
        """The mail ingress, where replies come in (when the agents start)."""
        if not settings.catalog_file.is_file():
            return []
        raw = os.environ.get("LEMONGRAPH_MAIL_INGRESS_PORT", "").strip() or "2525"
        if not raw.isdigit():  # mail-ingress itself says what is wrong with it
            return []
        return [
            Listener(
                "127.0.0.1",
                int(raw),
                "the mail ingress, where replies come in",
                "set LEMONGRAPH_MAIL_INGRESS_PORT",
            )
        ]

    def start_mail(self) -> Callable[[], list[dict[str, Any]]] | None:
        """Catch outbound mail while LEMONGRAPH_SMTP_URL is unset."""
        from agents.channels.mail_service import MailCatcher

        if os.environ.get("LEMONGRAPH_SMTP_URL"):
            return None
        catcher = MailCatcher("127.0.0.1", free_port()).start()
        self.stops.append(catcher.stop)
        self.smtp_url = catcher.url
        self.say(
            f"mail: outbound mail is caught at {catcher.url} (LEMONGRAPH_SMTP_URL is "
            "unset): see it at GET /v1/dev/mail and on the job page"
        )
        return catcher.mails

    def start(self, settings: Settings) -> None:
        """The model (:meth:`start_model`), the demo tools (for the tool URLs not
        set), and ``lemongraph agents`` and ``lemongraph mail-ingress`` (sending to
        the mail catcher, when it runs) as child processes. Without a catalog there
        are no agents, and it says so."""
        from agents.dev.demo_tools import TOOL_URLS, build_demo_tools
        from agents.dev.serving import AppThread

        if not settings.catalog_file.is_file():
            self.say(f"agents: not started: no catalog at {settings.catalog_file} (docs/agents.md)")
            return
        # .env under the environment, as the settings read it: the model the
        # children use is the one printed here.
        env = read_dotenv(Path(".env"))
        env.update(os.environ)
        env.update(
            LEMONGRAPH_KAFKA_URL=settings.kafka_url or "",
            LEMONGRAPH_DATA_DIR=str(settings.data_dir),
            LEMONGRAPH_TOPIC_PREFIX=settings.topic_prefix,
            LEMONGRAPH_PARTITIONS=str(settings.partitions),
            LEMONGRAPH_PLAYBOOKS_DIR=str(settings.playbooks_dir),
            LEMONGRAPH_DEV_CHILD="1",  # dev said the topics and the model: not again
            # Each child serves its metrics on a free port and says where.
            LEMONGRAPH_METRICS_PORT="0" if settings.metrics_port is not None else "",
            LEMONGRAPH_METRICS_HOST=settings.metrics_host,
        )
        self.start_model(env, settings.playbooks_dir / "flows")
        unset = [name for name in TOOL_URLS if not env.get(name)]
        if unset:
            demo = AppThread(build_demo_tools(), "127.0.0.1", free_port(), "demo tools").start()
            self.stops.append(demo.stop)
            env.update({name: demo.url + TOOL_URLS[name] for name in unset})
            self.say(f"agents: demo tools at {demo.url} for {', '.join(unset)} (docs/agents.md)")
        self.start_demo_mcp(env, settings)
        children = [_child(["agents"], env)]
        self.stops.append(functools.partial(_stop_children, children))
        if self.smtp_url is not None:
            env["LEMONGRAPH_SMTP_URL"] = self.smtp_url
        if not env.get("REPLY_TOKEN_SECRET"):
            env["REPLY_TOKEN_SECRET"] = secrets.token_urlsafe(32)  # as the gateway's new_secret
            self.say("mail: REPLY_TOKEN_SECRET is empty: using a random secret for this session")
        children.append(_child(["mail-ingress"], env))

    def start_demo_mcp(self, env: dict[str, str], settings: Settings) -> None:
        """The demo MCP servers over streamable HTTP, each when the catalog names
        its ``${VAR}`` and it is unset (docs/agents.md, "MCP servers"): the setup
        guide (``SETUP_MCP_URL``) and the order desk (``ORDERS_MCP_URL``)."""
        from agents.dev.demo_mcp import DEMO_MCP
        from agents.dev.serving import AppThread

        catalog = settings.catalog_file.read_text("utf-8")
        served = []
        for name, build in DEMO_MCP.items():
            if env.get(name) or "${" + name + "}" not in catalog:
                continue
            server = AppThread(
                build().streamable_http_app(), "127.0.0.1", free_port(), "demo MCP server"
            ).start()
            self.stops.append(server.stop)
            env[name] = f"{server.url}/mcp"
            served.append(f"{env[name]} for {name}")
        if served:
            self.say(f"agents: demo MCP servers at {', '.join(served)} (docs/agents.md)")

    def start_model(self, env: dict[str, str], flows: Path) -> None:
        """The stand-in model when ``LEMONGRAPH_STANDIN_SCRIPT`` names a script, or
        when neither ``OPENAI_API_KEY`` nor ``OPENAI_BASE_URL`` says which model to
        use; ``env`` is pointed at it. Says which model the agents use."""
        from agents.dev.standin import StandinThread
        from agents.model import ModelSettings

        named = env.get("LEMONGRAPH_STANDIN_SCRIPT", "").strip()
        if named or not (env.get("OPENAI_API_KEY") or env.get("OPENAI_BASE_URL")):
            script, files = dev_script(Path(named) if named else None, flows)
            standin = StandinThread("127.0.0.1", free_port(), script)
            standin.start()
            self.stops.append(standin.stop)
            # OPENAI_MODEL too: the agents print (and journal) the model they call.
            env.update(
                OPENAI_BASE_URL=standin.url, OPENAI_API_KEY="standin", OPENAI_MODEL="standin"
            )
            answers = f"script {', '.join(map(str, files))}" if files else "built-in policy"
            why = (
                "LEMONGRAPH_STANDIN_SCRIPT is set"
                if named
                else "neither OPENAI_API_KEY nor OPENAI_BASE_URL is set"
            )
            self.say(f"agents: model standin: the stand-in ({answers}) at {standin.url} ({why})")
            return
        try:
            model = ModelSettings.from_env(env)
        except ValueError:
            return  # `lemongraph agents` says what is wrong with it
        where = model.base_url or "OpenAI (https://api.openai.com/v1)"
        self.say(f"agents: model: {model.model} at {where} ({model.api} API)")

    def stop(self) -> None:
        """Stop what was started, last first."""
        for stop in reversed(self.stops):
            stop()


def dev_script(named: Path | None, flows: Path) -> tuple[StandinScript | None, list[Path]]:
    """The stand-in's script under ``dev``: the rules of each flow's
    ``NAME.standin.yaml`` in ``flows``, each held to its own flow (a rule that
    names no ``flow`` gets ``flow: NAME``), then those of ``named`` (the
    ``LEMONGRAPH_STANDIN_SCRIPT``); None when there are none. With the files read.
    Raises ``ConfigError`` naming a file that is not a script."""
    from agents.dev.standin import StandinScript, load_script

    found = sorted(p for p in flows.iterdir() if is_standin_script(p)) if flows.is_dir() else []
    # (file, the flow its rules are held to: None for the named script's)
    sources: list[tuple[Path, str | None]] = [(p, p.name.split(".standin.")[0]) for p in found]
    if named is not None:
        sources.append((named, None))
    rules: list[dict[str, Any]] = []
    for path, flow in sources:
        try:
            script = load_script(path)
        except ValueError as exc:
            why = f"LEMONGRAPH_STANDIN_SCRIPT: {exc}" if flow is None else str(exc)
            raise ConfigError(why) from None
        for rule in script.rules:
            dumped = rule.model_dump(mode="json", by_alias=True, exclude_unset=True)
            if flow is not None:
                dumped["when"] = {"flow": flow} | dumped.get("when", {})
            rules.append(dumped)
    files = [path for path, _ in sources]
    if not files:
        return None, files
    return StandinScript.model_validate({"rules": rules}), files


def _stop_children(children: list[subprocess.Popen[bytes]]) -> None:
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


def _child(command: list[str], env: dict[str, str]) -> subprocess.Popen[bytes]:
    """``lemongraph COMMAND`` as a child of ``dev`` that dies with it. ``dev``
    stops its children with SIGTERM; if ``dev`` itself is gone first (killed, or
    out after a dead broker), they get SIGKILL: what they did is on the broker,
    acknowledged, and they take over from there next time."""
    return subprocess.Popen(  # noqa: S603 - our own interpreter and entry point
        [sys.executable, "-m", "stream", *command],
        env=env,
        preexec_fn=functools.partial(die_with_parent, signal.SIGKILL),
    )
