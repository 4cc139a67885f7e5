"""The step function of flows: its state, its inputs and its actions, as values
(docs/flows.md, "Running a flow").

``FlowRun(flow).next(state, input, now)`` is pure: it reads no clock (``now`` is
an argument), calls no model, tool or registered function, and draws no random
number. It returns the new state and the actions the runtime must carry out;
the runtime feeds each action's result back as the next input. Registered
functions (handlers, routers) are run by the runtime too, so a replay reads
their recorded results and never calls them again.

The state, inputs and actions (and the ids of calls and interrupts) are in
``_flowvalues.py``.
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Callable
from datetime import datetime
from typing import Any

from compiler._durations import parse_duration
from compiler.flows import _flowbounds as bounds
from compiler.flows._flowfiles import asks_for_file, file_value_problem, prompt_files
from compiler.flows._flowmeaning import approval_says_yes, route_of
from compiler.flows._flowreply import reply_value
from compiler.flows._flowschema import value_kind
from compiler.flows._flowspec import (
    END,
    HISTORY,
    TEMPLATE,
    AnyNode,
    ApprovalNode,
    AskNode,
    ConditionalEdge,
    FanoutNode,
    Flow,
    HandlerNode,
    LlmNode,
    PlainEdge,
    ToolNode,
    ToolsNode,
    builtin_channels,
    output_of,
)
from compiler.flows._flowvalues import (
    Action,
    Answer,
    Ask,
    AwaitApproval,
    Branch,
    CallHandler,
    CallModel,
    CallRouter,
    CallTool,
    Fail,
    Finish,
    FlowFailure,
    FlowInput,
    FlowStart,
    FlowState,
    HandlerResult,
    Interrupt,
    Join,
    ModelReply,
    RouterResult,
    ToolResult,
    call_id,
    interrupt_id,
    tool_call_id,
)
from compiler.flows._readable import readable_inline

__all__ = [
    "FlowRun",
]


# ---------------------------------------------------------------------------
# The step function

#: More node entries than this in one step means the flow loops without ever
#: waiting on anything (a fan-out over an empty list whose onError is itself);
#: one fan-out alone enters up to FANOUT_MAX_ITEMS copies.
_MAX_ENTRIES_PER_STEP = 2 * bounds.FANOUT_MAX_ITEMS


def _json_text(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, sort_keys=True)


def _walk(value: Any, path: list[str]) -> Any:
    for part in path:
        if isinstance(value, dict):
            value = value.get(part)
        elif isinstance(value, list) and part.isdigit() and int(part) < len(value):
            value = value[int(part)]
        else:
            return None
    return value


class _Step:
    """One step's working copy of a state: edited in place, frozen at the end."""

    def __init__(self, flow: Flow, state: FlowState, now: datetime) -> None:
        self.flow = flow
        self.state = state
        self.now = now
        self.run_id = state.run_id
        self.channels = dict(state.channels)
        self.branches = list(state.branches)
        self.joins = list(state.joins)
        self.visits = dict(state.visits)
        self.limit_counts = dict(state.limit_counts)
        self.attempts = dict(state.attempts)
        self.pending = list(state.pending)
        self.tool_results = dict(state.tool_results)
        self.interrupt = state.interrupt
        self.trail = list(state.trail)
        self.status = state.status
        self.outputs = state.outputs
        self.failure = state.failure
        self.actions: list[Action] = []
        self.entries = 0

    @property
    def over(self) -> bool:
        return self.status in ("finished", "failed")

    def freeze(self) -> FlowState:
        status = self.status
        if not self.over:
            status = "waiting" if self.interrupt is not None else "running"
        # Its parts are the state's own, valid already: not checked again (a
        # fan-out's step would check every copy's branch).
        return FlowState.model_construct(
            flow=self.state.flow,
            version=self.state.version,
            digest=self.state.digest,
            run_id=self.run_id,
            channels=self.channels,
            branches=tuple(self.branches),
            joins=tuple(self.joins),
            visits=self.visits,
            limit_counts=self.limit_counts,
            attempts=self.attempts,
            pending=tuple(self.pending),
            tool_results=self.tool_results,
            interrupt=self.interrupt,
            trail=tuple(self.trail),
            status=status,
            outputs=self.outputs,
            failure=self.failure,
        )

    # -- channels ---------------------------------------------------------

    def read(self, name: str, branch: Branch | None) -> Any:
        if branch is not None and branch.fanout is not None and branch.item is not None:
            fanout = self.flow.nodes[branch.fanout]
            if isinstance(fanout, FanoutNode) and fanout.as_ == name:
                return branch.item_value
        return self.channels.get(name)

    def view(self, names: tuple[str, ...] | None, branch: Branch | None) -> dict[str, Any]:
        if names is None:
            history = (HISTORY,) if self.flow.spec.conversation else ()
            names = (*self.flow.channels, "conversation", *history, "last_error")
        return {name: self.read(name, branch) for name in names}

    def render(
        self, text: str, branch: Branch | None, inline: Callable[[Any], str] | None = None
    ) -> str:
        """``text`` with its templates filled: a string as it stands, anything
        else as JSON (for a model or a tool), or by ``inline`` (for a person)."""

        def one(match: re.Match[str]) -> str:
            value = _walk(self.read(match.group(1), branch), match.group(2).split(".")[1:])
            if value is None:
                return ""
            if isinstance(value, str):
                return value
            return inline(value) if inline is not None else _json_text(value)

        return TEMPLATE.sub(one, text)

    def render_value(self, value: Any, branch: Branch | None) -> Any:
        if isinstance(value, str):
            whole = TEMPLATE.fullmatch(value)
            if whole is not None:
                return _walk(self.read(whole.group(1), branch), whole.group(2).split(".")[1:])
            return self.render(value, branch)
        if isinstance(value, dict):
            return {k: self.render_value(v, branch) for k, v in value.items()}
        if isinstance(value, list):
            return [self.render_value(v, branch) for v in value]
        return value

    def write(self, name: str, value: Any) -> str | None:
        """Write ``value`` to channel ``name`` through its reducer; the reason
        when it cannot be written."""
        spec = self.flow.channels.get(name)
        reducer = spec.reducer if spec is not None else None
        current = self.channels.get(name)
        if reducer == "append":
            items = list(current) if isinstance(current, list) else []
            self.channels[name] = [*items, copy.deepcopy(value)]
        elif reducer == "merge":
            if not isinstance(value, dict):
                return f"{name} merges objects, and the value is {value_kind(value)}"
            base = dict(current) if isinstance(current, dict) else {}
            self.channels[name] = {**base, **copy.deepcopy(value)}
        else:
            self.channels[name] = copy.deepcopy(value)
        return None

    # -- branches ---------------------------------------------------------

    def put(self, branch: Branch) -> None:
        self.branches.append(branch)

    def drop(self, branch: Branch) -> None:
        # By identity, searched from the front (copies mostly end in order): a
        # step costs little more than its own branch, in a fan-out of thousands.
        at = next((i for i, b in enumerate(self.branches) if b is branch), None)
        if at is not None:
            del self.branches[at]
        waited = {branch.call_id, *(c["call_id"] for c in branch.calls)}
        if branch.calls:
            # A tools call another branch waits on too stays pending (its id is the
            # call's content, so two fan-out copies may wait on one call).
            waited -= {c["call_id"] for b in self.branches for c in b.calls if not c["done"]}
        for cid in waited:
            while cid in self.pending:
                self.pending.remove(cid)

    def wait_call(self, branch: Branch, cid: str, waiting: str, action: Action) -> None:
        self.put(branch.model_copy(update={"call_id": cid, "waiting": waiting}))
        self.pending.append(cid)
        self.actions.append(action)

    def cid(self, branch: Branch) -> str:
        return call_id(self.run_id, branch.node, branch.visit, branch.attempt, branch.item)

    # -- entering nodes ---------------------------------------------------

    def count_visit(self, node: str) -> int:
        visit = self.visits.get(node, 0) + 1
        self.visits[node] = visit
        for edge in self.flow.edges.values():
            if isinstance(edge, ConditionalEdge):
                for route, limit in edge.limits.items():
                    if limit.per == node:
                        self.limit_counts.pop(f"{edge.from_}/{route}", None)
        return visit

    def enter(
        self,
        node_id: str,
        *,
        visit: int | None = None,
        attempt: int = 1,
        fanout: str | None = None,
        item: int | None = None,
        item_value: Any = None,
    ) -> None:
        if self.over:
            return
        self.entries += 1
        if self.entries > _MAX_ENTRIES_PER_STEP:
            self.fail_run(node_id, "the flow goes round without waiting on anything")
            return
        if node_id == END:
            self.finish()
            return
        node = self.flow.nodes[node_id]
        if visit is None:
            visit = self.count_visit(node_id)
        where = {"fanout": fanout, "item": item, "item_value": item_value}
        branch = Branch(node=node_id, visit=visit, attempt=attempt, **where)
        if item is None:
            self.attempts[node_id] = attempt
        call = self.call_of(node, branch)
        if call is not None:
            self.wait_call(branch, *call)
        elif isinstance(node, ToolsNode):
            self.enter_tools(node, branch)
        elif isinstance(node, AskNode | ApprovalNode):
            self.put(branch)
            self.ask_next()
        elif isinstance(node, FanoutNode):
            self.spread(node, branch)

    def call_of(self, node: AnyNode, branch: Branch) -> tuple[str, str, Action] | None:
        """The call an llm, tool or handler node makes: its id, kind and action."""
        cid = self.cid(branch)
        action: Action
        if isinstance(node, LlmNode):
            prompt = self.render(node.prompt, branch)
            files = prompt_files(node.prompt, self.flow.channels, lambda n: self.read(n, branch))
            action = CallModel(
                call_id=cid, node=node.id, prompt=prompt, schema_=node.schema_, files=files
            )
            return cid, "model", action
        if isinstance(node, ToolNode):
            args = self.render_value(node.args, branch)
            return cid, "tool", CallTool(call_id=cid, node=node.id, tool=node.tool, args=args)
        if isinstance(node, HandlerNode):
            view = self.view(node.reads, branch)
            action = CallHandler(call_id=cid, node=node.id, handler=node.handler, view=view)
            return cid, "handler", action
        return None

    def enter_tools(self, node: ToolsNode, branch: Branch) -> None:
        """Issue the calls of ``calls``, each under the id of its content: a
        call answered earlier in the run is not issued again (its result is
        reused), and a call already out is waited on, not issued twice."""
        calls = self.read(node.calls, branch)
        if not isinstance(calls, list):
            kind = value_kind(calls)
            self.fail(branch, f"{node.calls} must be a list of calls, and it is {kind}")
            return
        records = [self.tools_call(node, call) for call in calls]
        update = {"call_id": self.cid(branch), "waiting": "tool", "calls": tuple(records)}
        branch = branch.model_copy(update=update)
        if all(r["done"] for r in records):
            self.complete(branch, [_tool_record(r) for r in records])
            return
        self.put(branch)

    def tools_call(self, node: ToolsNode, call: Any) -> dict[str, Any]:
        """One call of a ``tools`` node as its branch records it (issued when
        it needs to be)."""
        given = call if isinstance(call, dict) else {}
        name, args = given.get("name"), given.get("args")
        record: dict[str, Any] = {
            "call_id": None,
            "id": given.get("id"),
            "name": name,
            "done": True,
            "result": None,
            "error": None,
        }
        if not isinstance(name, str) or not isinstance(args, dict | None):
            record["error"] = "not a call: a call is {name, args, id}"
            return record
        if name not in self.flow.tools:
            record["error"] = f"tool {name!r} is not in the flow's tools"
            return record
        cid = tool_call_id(self.run_id, name, args or {})
        record["call_id"] = cid
        if cid in self.tool_results:
            record["result"] = copy.deepcopy(self.tool_results[cid])
            return record
        record["done"] = False
        if cid not in self.pending:
            self.pending.append(cid)
            self.actions.append(CallTool(call_id=cid, node=node.id, tool=name, args=args or {}))
        return record

    def spread(self, node: FanoutNode, branch: Branch) -> None:
        items = self.read(node.over, branch)
        if not isinstance(items, list):
            self.fail(branch, f"{node.over} must be a list, and it is {value_kind(items)}")
            return
        if not items:
            self.fail(branch, f"{node.over} is empty: the fan-out has nothing to spread over")
            return
        too_many = bounds.fanout_too_large(
            len(items)
        )  # before any copy or call (docs/flows.md, "Bounds")
        if too_many is not None:
            self.fail(branch, too_many, retry=False)
            return
        self.trail.append(node.id)
        self.attempts.pop(node.id, None)
        visit = self.count_visit(node.to)
        self.joins.append(Join(fanout=node.id, visit=visit, target=node.to, items=len(items)))
        for index, value in enumerate(items):
            self.enter(node.to, visit=visit, fanout=node.id, item=index, item_value=value)

    def ask_next(self) -> None:
        """Put the next question or approval waiting its turn (one at a time)."""
        if self.interrupt is not None or self.over:
            return
        for branch in self.branches:
            node = self.flow.nodes[branch.node]
            if branch.call_id is not None or not isinstance(node, AskNode | ApprovalNode):
                continue
            iid = interrupt_id(self.run_id, node.id, branch.visit, branch.item)
            expires = self.now + parse_duration(node.expires) if node.expires is not None else None
            # Words for a person: a value that is not a string reads as words, never
            # as JSON (docs/flows.md, "Templates").
            question = self.render(node.ask, branch, readable_inline)
            ask = isinstance(node, AskNode)
            asked = Interrupt(
                interrupt_id=iid,
                node=node.id,
                kind="ask" if ask else "approval",
                question=question,
                answers=node.answers if isinstance(node, AskNode) else (),
                before=node.before if isinstance(node, ApprovalNode) else None,
                show=self.view(node.show, branch) if isinstance(node, ApprovalNode) else {},
                expires_at=expires,
                item=branch.item,
            )
            self.interrupt = asked
            action = _interrupt_action(asked)
            wants = asks_for_file(node, self.flow.channels) if isinstance(node, AskNode) else None
            if wants is not None and isinstance(action, Ask):
                action = action.model_copy(update={"expects": "file", "accept": wants.accept})
            self.actions.append(action)
            return

    # -- leaving nodes ----------------------------------------------------

    def complete(self, branch: Branch, value: Any, *, write: bool = True) -> None:
        """``branch``'s node succeeded with ``value`` (written to its output)."""
        node = self.flow.nodes[branch.node]
        self.drop(branch)
        out = output_of(node)
        if write and out is not None:
            problem = bounds.output_too_large(value) or self.write(out, value)
            if problem is not None:
                self.fail(branch, problem)
                return
        self.trail.append(node.id)
        if branch.item is not None:
            self.copy_done(branch, failed=False)
            return
        self.attempts.pop(node.id, None)
        last = self.channels.get("last_error")
        if isinstance(last, dict) and last.get("node") == node.id:
            self.channels["last_error"] = None
        self.follow(branch)

    def copy_done(self, branch: Branch, *, failed: bool) -> None:
        join = next(j for j in self.joins if j.fanout == branch.fanout)
        join = join.model_copy(
            update={
                "done": (*join.done, branch.item),
                "failed": (*join.failed, branch.item) if failed else join.failed,
            }
        )
        self.joins = [join if j.fanout == join.fanout else j for j in self.joins]
        if len(join.done) < join.items:
            return
        self.joins = [j for j in self.joins if j.fanout != join.fanout]
        target = self.flow.nodes[join.target]
        self.attempts.pop(target.id, None)
        if join.failed and target.on_error is not None:
            self.enter(target.on_error)
            return
        after = Branch(node=target.id, visit=join.visit, fanout=join.fanout)
        self.follow(after)

    def follow(self, branch: Branch) -> None:
        """Take the edge out of ``branch``'s node (which is done)."""
        edge = self.flow.edges.get(branch.node)
        if isinstance(edge, PlainEdge):
            self.enter(edge.to)
        elif isinstance(edge, ConditionalEdge) and edge.router is not None:
            cid = f"{self.cid(branch)}/route"
            view = self.view(edge.reads, None)
            self.wait_call(
                branch,
                cid,
                "router",
                CallRouter(call_id=cid, edge_from=edge.from_, router=edge.router, view=view),
            )
        elif isinstance(edge, ConditionalEdge):
            assert edge.when is not None
            name, *path = edge.when.split(".")
            value = _walk(self.channels.get(name), path)
            route = route_of(value)
            if route not in edge.routes:
                if "else" not in edge.routes:
                    self.fail(
                        branch,
                        f"{edge.when} is {route!r} (routes: {', '.join(edge.routes)}) "
                        "and the edge has no else route",
                    )
                    return
                route = "else"
            self.take(branch, edge, route)
        else:
            self.fail_run(branch.node, f"node {branch.node!r} has no edge out")

    def take(self, branch: Branch, edge: ConditionalEdge, route: str) -> None:
        seen: set[str] = set()
        while route in edge.limits:
            limit = edge.limits[route]
            if self.limit_counts.get(f"{edge.from_}/{route}", 0) < limit.max:
                break
            seen.add(route)
            route = limit.then
            if route in seen:
                self.fail(branch, "every route of the edge is over its limit", retry=False)
                return
        if route in edge.limits:
            key = f"{edge.from_}/{route}"
            self.limit_counts[key] = self.limit_counts.get(key, 0) + 1
        self.enter(edge.routes[route])

    def fail(self, branch: Branch, message: str, *, retry: bool = True) -> None:
        """``branch``'s node failed: again while ``retry`` allows, then its
        ``onError``, else the run fails."""
        node = self.flow.nodes[branch.node]
        self.drop(branch)
        most = node.retry.max_attempts if node.retry is not None else 1
        after_join = branch.fanout is not None and branch.item is None
        if retry and not after_join and branch.attempt < most:
            self.enter(
                node.id,
                visit=branch.visit,
                attempt=branch.attempt + 1,
                fanout=branch.fanout,
                item=branch.item,
                item_value=branch.item_value,
            )
            return
        if node.on_error is None:
            self.fail_run(node.id, message)
            return
        self.channels["last_error"] = {"node": node.id, "message": message}
        if branch.item is not None:
            self.copy_done(branch, failed=True)
            return
        self.attempts.pop(node.id, None)
        self.enter(node.on_error)

    def fail_run(self, node: str, message: str) -> None:
        self.status = "failed"
        self.failure = FlowFailure(node=node, message=message)
        self.stop()
        self.actions.append(Fail(node=node, error=message))

    def finish(self) -> None:
        self.status = "finished"
        self.outputs = {name: self.channels.get(name) for name in self.flow.spec.outputs}
        self.stop()
        self.actions.append(Finish(outputs=self.outputs))

    def stop(self) -> None:
        self.branches, self.joins, self.pending = [], [], []
        self.interrupt = None
        self.attempts = {}

    # -- inputs -----------------------------------------------------------

    def begin(self, given: FlowStart) -> bool:
        state = self.state
        if state.visits or state.trail or state.branches or given.run_id != state.run_id:
            return False
        spec = self.flow.spec
        # The built-ins the runtime gives: the conversation, the memory and a
        # conversational flow's history (docs/flows.md, "Conversational flows").
        allowed = {*spec.inputs, *builtin_channels(spec)} - {"last_error"}
        allowed |= {k for k, v in spec.state.items() if v.remembers}
        unknown = sorted(set(given.inputs) - allowed)
        if unknown:
            raise ValueError(
                f"flow {self.flow.name}: {', '.join(unknown)} is not an input "
                f"(inputs: {', '.join(spec.inputs) or 'none'}; or a channel that remembers)"
            )
        channels: dict[str, Any] = {k: [] for k in builtin_channels(spec)} | {"last_error": None}
        for name, channel in spec.state.items():
            if channel.default is not None:
                channels[name] = copy.deepcopy(channel.default)
        channels.update(copy.deepcopy(given.inputs))
        self.channels = channels
        self.enter(self.flow.start)
        return True

    def waiting(self, cid: str, kind: str) -> Branch | None:
        if cid not in self.pending:
            return None
        for branch in self.branches:
            if branch.waiting != kind:
                continue
            if branch.call_id == cid or any(c["call_id"] == cid for c in branch.calls):
                return branch
        return None

    def result(self, given: ModelReply | ToolResult | HandlerResult | RouterResult) -> bool:
        """A call's result: the branch that waits on it goes on (False when stale)."""
        kinds = {"model_reply": "model", "tool_result": "tool", "handler_result": "handler"}
        branch = self.waiting(given.call_id, kinds.get(given.kind, "router"))
        if branch is None:
            return False
        if isinstance(given, ModelReply):
            self.model_reply(branch, given)
        elif isinstance(given, RouterResult):
            self.router_result(branch, given)
        elif branch.calls:
            self.tools_result(given)
        elif given.ok:
            self.complete(branch, given.result)
        else:
            self.fail(branch, given.error or f"the {branch.waiting} call failed")
        return True

    def model_reply(self, branch: Branch, given: ModelReply) -> None:
        node = self.flow.nodes[branch.node]
        assert isinstance(node, LlmNode)
        if given.error is not None:
            self.fail(branch, given.error)
            return
        value, problem = reply_value(node, self.flow.channels, given.text)
        if problem is not None:
            self.fail(branch, problem)
            return
        self.complete(branch, value)

    def tools_result(self, given: ToolResult | HandlerResult) -> None:
        """A ``tools`` call answered: every branch waiting on it takes the
        result (a success is kept for the rest of the run)."""
        self.pending.remove(given.call_id)
        if given.ok:
            self.tool_results[given.call_id] = copy.deepcopy(given.result)
            for old in list(self.tool_results)[: -bounds.TOOL_RESULTS_KEPT]:  # the latest are kept
                del self.tool_results[old]
        answer = {
            "done": True,
            "result": given.result if given.ok else None,
            "error": None if given.ok else (given.error or "the tool call failed"),
        }

        def answered(call: dict[str, Any]) -> bool:
            return call["call_id"] == given.call_id and not call["done"]

        waiting = [b for b in self.branches if any(answered(c) for c in b.calls)]
        for branch in waiting:
            if self.over:
                return
            calls = tuple(
                {**c, **copy.deepcopy(answer)} if answered(c) else c for c in branch.calls
            )
            updated = branch.model_copy(update={"calls": calls})
            self.branches = [updated if b is branch else b for b in self.branches]
            if all(c["done"] for c in calls):
                self.complete(updated, [_tool_record(c) for c in calls])

    def router_result(self, branch: Branch, given: RouterResult) -> None:
        edge = self.flow.edges[branch.node]
        assert isinstance(edge, ConditionalEdge)
        self.drop(branch)
        if given.route not in edge.routes:
            self.fail(
                branch,
                f"router {edge.router} chose route {given.route!r}, which the edge does not "
                f"have (routes: {', '.join(edge.routes)})",
            )
            return
        self.take(branch, edge, given.route)

    def answer(self, given: Answer) -> bool:
        asked = self.interrupt
        if asked is None or given.interrupt_id != asked.interrupt_id:
            return False
        branch = self.asking(asked)
        if asked.kind == "ask":
            value = given.answer
            node = self.flow.nodes[asked.node]
            wants = asks_for_file(node, self.flow.channels) if isinstance(node, AskNode) else None
            if wants is not None and file_value_problem(value, wants.accept) is not None:
                return False  # a file channel takes a file value only
            if asked.answers:
                said = value.strip().casefold() if isinstance(value, str) else None
                chosen = [a for a in asked.answers if a.strip().casefold() == said]
                if not chosen:
                    return False
                value = chosen[0]
            self.interrupt = None
            self.complete(branch, value)
        else:
            self.interrupt = None
            self.decide(branch, approval_says_yes(given.answer))
        self.ask_next()
        return True

    def asking(self, asked: Interrupt) -> Branch:
        return next(
            b
            for b in self.branches
            if b.node == asked.node and b.item == asked.item and b.call_id is None
        )

    def decide(self, branch: Branch, yes: bool) -> None:
        node = self.flow.nodes[branch.node]
        assert isinstance(node, ApprovalNode)
        self.drop(branch)
        self.trail.append(node.id)
        self.attempts.pop(node.id, None)
        self.enter(node.before if yes else node.on_reject)

    def tick(self) -> bool:
        asked = self.interrupt
        if asked is None or asked.expires_at is None or self.now < asked.expires_at:
            return False
        branch = self.asking(asked)
        self.interrupt = None
        if asked.kind == "approval":
            self.decide(branch, False)
        else:
            self.fail(branch, f"no answer by {asked.expires_at.isoformat()}")
        self.ask_next()
        return True


def _interrupt_action(asked: Interrupt) -> Action:
    common = asked.model_dump(include={"interrupt_id", "node", "question", "expires_at"})
    if asked.kind == "ask":
        return Ask(**common, answers=asked.answers)
    assert asked.before is not None
    return AwaitApproval(**common, before=asked.before, show=asked.show)


def _tool_record(call: dict[str, Any]) -> dict[str, Any]:
    return {k: call[k] for k in ("id", "name", "result", "error")}


class FlowRun:
    """Runs one compiled :class:`~compiler.Flow`, one pure step at a time."""

    def __init__(self, flow: Flow) -> None:
        self.flow = flow

    def start(
        self, run_id: str, inputs: dict[str, Any], now: datetime
    ) -> tuple[FlowState, list[Action]]:
        """A new run: the same as ``next`` on an empty state with ``FlowStart``."""
        state = FlowState(
            flow=self.flow.name,
            version=self.flow.version,
            digest=self.flow.digest,
            run_id=run_id,
        )
        return self.next(state, FlowStart(run_id=run_id, inputs=inputs), now)

    def next(
        self, state: FlowState, input: FlowInput, now: datetime
    ) -> tuple[FlowState, list[Action]]:
        """The state after ``input`` and the actions to carry out, in order.

        A result whose id is not pending, an answer to another interrupt, and
        anything given to a finished or failed run change nothing (the state is
        returned as it was, with no action).
        """
        if state.digest != self.flow.digest:
            raise ValueError(
                f"the state is of flow {state.flow} (digest {state.digest}), not of this one "
                f"({self.flow.name}, digest {self.flow.digest})"
            )
        if state.status in ("finished", "failed"):
            return state, []
        step = _Step(self.flow, state, now)
        if isinstance(input, FlowStart):
            moved = step.begin(input)
        elif isinstance(input, ModelReply | ToolResult | HandlerResult | RouterResult):
            moved = step.result(input)
        elif isinstance(input, Answer):
            moved = step.answer(input)
        else:
            moved = step.tick()
        if not moved:
            return state, []
        return step.freeze(), step.actions
