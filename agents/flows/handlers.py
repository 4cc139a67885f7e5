"""The registry of a flow's handlers and routers: Python functions by name
(docs/flows.md, "Handlers and routers").

A module registers functions with the decorators of this module::

    from agents.flows.handlers import handler, router

    @handler("split_ids")
    def split_ids(view: dict) -> list[str]:      # the channels it reads
        return [part.strip() for part in view["text"].split(",") if part.strip()]

    @router("route_ticket")
    async def route_ticket(view: dict) -> str:    # sync or async
        return view["classification"]["category"]

The modules are found two ways: the entry-point group ``lemongraph.handlers``
(each entry point names a module: ``demo = "agents.flows.demo_handlers"`` under
``[project.entry-points."lemongraph.handlers"]``), and ``LEMONGRAPH_HANDLERS``
(``module[,module]``, importable from the working directory). A handler returns
a JSON value (written to the node's ``output``); a router returns a route name.
What either raises is the node's failure, never the caller's.
"""

from __future__ import annotations

import importlib
import inspect
import os
import sys
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from importlib.metadata import entry_points
from types import ModuleType
from typing import Any, Literal, TypeVar

import orjson
from compiler import CallHandler, CallRouter, HandlerResult, LemongraphError, RouterResult

from agents.errors import AgentsError
from agents.publish import Publish

__all__ = [
    "ENTRY_POINTS",
    "HandlerContext",
    "HandlerRegistry",
    "RegistryError",
    "handler",
    "load_registry",
    "registered_in",
    "router",
]

#: The entry-point group whose entry points name modules of handlers and routers.
ENTRY_POINTS = "lemongraph.handlers"
#: The attribute the decorators set on a function: ``(kind, name)``.
_MARK = "__lemongraph_flow__"
#: Set on a handler that takes the call's context as its second argument.
_WANTS_CONTEXT = "__lemongraph_context__"

Kind = Literal["handler", "router"]
F = TypeVar("F", bound=Callable[..., Any])


def _mark(kind: Kind, name: str) -> Callable[[F], F]:
    if not name or not name.replace("_", "a").replace("-", "a").isalnum():
        raise ValueError(f"{kind} name {name!r}: letters, digits, _ and - only")

    def decorate(fn: F) -> F:
        setattr(fn, _MARK, (kind, name))
        return fn

    return decorate


def handler(name: str, *, context: bool = False) -> Callable[[F], F]:
    """Register the function as handler ``name``: called with the view (a dict
    of the channels the node reads), it returns a JSON value. With ``context``
    it is called with a :class:`HandlerContext` too (docs/flows.md, "Handlers
    and routers"): trusted code that needs the job (the coding workflow's)."""
    marked = _mark("handler", name)

    def decorate(fn: F) -> F:
        setattr(fn, _WANTS_CONTEXT, context)
        return marked(fn)

    return decorate


@dataclass(frozen=True)
class HandlerContext:
    """What a handler registered with ``context=True`` is given besides its
    view: the job (None outside one), the run, the call (its id: made from the
    run's own data, a key for what the handler records), the flow and node,
    ``publish`` (``"inbox"`` for facts, ``"journal"``) and the trusted tool
    executor (its ``workspaces``: the jobs' worktrees)."""

    job_key: str | None
    run_id: str
    call_id: str
    flow: str
    node: str
    publish: Publish | None = None
    tools: Any = None


def router(name: str) -> Callable[[F], F]:
    """Register the function as router ``name``: called with the view, it
    returns the name of a route of its conditional edge."""
    return _mark("router", name)


class RegistryError(AgentsError, LemongraphError):
    """A module that cannot be imported, or one name registered twice."""

    code = "invalid_handlers"


def registered_in(module: ModuleType) -> list[tuple[Kind, str, Callable[..., Any]]]:
    """The functions of ``module`` the decorators marked, in definition order."""
    out: list[tuple[Kind, str, Callable[..., Any]]] = []
    for value in vars(module).values():
        mark = getattr(value, _MARK, None)
        if callable(value) and isinstance(mark, tuple) and len(mark) == 2:
            out.append((mark[0], mark[1], value))
    return out


@dataclass
class HandlerRegistry:
    """Handlers and routers by name, and the module each came from."""

    handlers: dict[str, Callable[..., Any]] = field(default_factory=dict)
    routers: dict[str, Callable[..., Any]] = field(default_factory=dict)
    origins: dict[str, str] = field(default_factory=dict)
    #: Why the last router call chose no route (for the journal).
    last_error: str | None = None

    def add_module(self, module: ModuleType) -> None:
        """Register every marked function of ``module``. Raises
        :class:`RegistryError` for a name another module took."""
        for kind, name, fn in registered_in(module):
            table = self.handlers if kind == "handler" else self.routers
            key = f"{kind}:{name}"
            if name in table and table[name] is not fn:
                raise RegistryError(
                    f"{kind} {name!r} is registered twice: by {self.origins[key]} "
                    f"and by {module.__name__}"
                )
            table[name] = fn
            self.origins[key] = module.__name__

    async def call_handler(
        self, action: CallHandler, context: HandlerContext | None = None
    ) -> HandlerResult:
        """Run the handler on the action's view (and ``context``, for a handler
        that takes it); what it raised is ``ok: false``."""
        ok, value = await self._run("handler", self.handlers, action.handler, action.view, context)
        if ok:
            try:
                value = orjson.loads(orjson.dumps(value))  # a JSON value, or it fails here
            except (TypeError, orjson.JSONEncodeError) as exc:
                ok, value = False, f"handler {action.handler!r} returned no JSON value: {exc}"
        if not ok:
            return HandlerResult(call_id=action.call_id, ok=False, error=str(value))
        return HandlerResult(call_id=action.call_id, ok=True, result=value)

    async def call_router(self, action: CallRouter) -> RouterResult:
        """Run the router on the action's view: the route it chose. A router
        that is not registered, raised, or returned no string chooses no route
        (``""``, which no edge has, so the node fails; the journal has why),
        or, when the step function's ``RouterResult`` carries an error, says so."""
        ok, route = await self._run("router", self.routers, action.router, action.view)
        if ok and not isinstance(route, str):
            ok = False
            route = f"router {action.router!r} returned {type(route).__name__}, not a route name"
        if ok:
            return RouterResult(call_id=action.call_id, route=route)
        if "error" in RouterResult.model_fields:
            fields = {"call_id": action.call_id, "route": "", "ok": False, "error": str(route)}
            return RouterResult.model_validate(
                {k: v for k, v in fields.items() if k in RouterResult.model_fields}
            )
        self.last_error = str(route)
        return RouterResult(call_id=action.call_id, route="")

    async def _run(
        self,
        kind: Kind,
        table: Mapping[str, Callable[..., Any]],
        name: str,
        view: Any,
        context: HandlerContext | None = None,
    ) -> tuple[bool, Any]:
        """(True, what it returned) or (False, why it failed)."""
        fn = table.get(name)
        if fn is None:
            return False, f"{kind} {name!r} is not registered"
        wants = getattr(fn, _WANTS_CONTEXT, False)
        if wants and context is None:
            return False, f"{kind} {name!r} needs the job's context, which this runner has not"
        try:
            value = fn(dict(view), context) if wants else fn(dict(view))
            if inspect.isawaitable(value):
                value = await value
        except Exception as exc:  # a registered function's failure is the node's
            return False, _why(exc)
        return True, value


def _why(exc: BaseException) -> str:
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def load_registry(
    env: Mapping[str, str] | None = None,
    *,
    modules: Iterable[str] = (),
    use_entry_points: bool = True,
) -> HandlerRegistry:
    """The registry of the installed entry points (group ``lemongraph.handlers``),
    of ``LEMONGRAPH_HANDLERS`` and of ``modules``. Raises :class:`RegistryError`
    naming a module that cannot be imported."""
    values = os.environ if env is None else env
    registry = HandlerRegistry()
    names: list[tuple[str, str]] = []
    if use_entry_points:
        for point in sorted(entry_points(group=ENTRY_POINTS), key=lambda p: p.name):
            names.append((point.value.split(":", 1)[0], f"entry point {point.name}"))
    configured = values.get("LEMONGRAPH_HANDLERS", "")
    names.extend((m.strip(), "LEMONGRAPH_HANDLERS") for m in configured.split(",") if m.strip())
    names.extend((m, "modules") for m in modules)
    if "" not in sys.path and os.getcwd() not in sys.path:
        sys.path.append(os.getcwd())  # LEMONGRAPH_HANDLERS=mymodule from where it runs
    for name, via in names:
        try:
            module = importlib.import_module(name)
        except Exception as exc:  # any import failure, reported by name
            raise RegistryError(f"{via}: cannot import {name!r}: {_why(exc)}") from None
        registry.add_module(module)
    return registry
