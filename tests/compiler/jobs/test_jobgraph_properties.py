"""Property tests for the decision core ``JobGraph.next`` (docs/playbooks.md,
'How a job moves'; docs/decisions.md), with hypothesis.

Random playbooks (small DAGs: 1–7 milestones, needs pointing to earlier milestones,
merge all/any, conditions over a small vocabulary, optional due and goals,
complete_when all/any) are compiled with ``compile_playbook`` and driven by random
input sequences (world/tool/agent events, repeated idempotency keys, ticks, times
that never run backwards). Properties:

(a) determinism — the same inputs give byte-identical states and step records;
(b) monotone statuses — a job ends at most once and never changes status after,
    a settled milestone never changes, transitions follow the milestone state chart;
(c) pruning — a dropped milestone could not have mattered at the moment it was
    dropped (checked with a dependency walk written here, not the core's), and
    nothing that cannot matter is left unsettled;
(d) replay — every state survives JSON and back, and re-running each step from the
    restored previous state reproduces its record and state hash;
(e) agent events never change a milestone or a tally;
(f) tasks — a task id is opened at most once and closed at most once, after it was
    opened; open tasks are exactly the milestones with ``task_open``;
(g) effects are the work that remains — no task is opened and closed in one step,
    a task opens only for a milestone open at the step's end with the frontier of
    the end (never empty), nothing is emitted after the job finished, no timer is
    both set and cancelled in one step.
"""

from __future__ import annotations

import functools
import json
from datetime import UTC, datetime, timedelta
from typing import Any

import orjson
from hypothesis import HealthCheck, assume, example, given, settings
from hypothesis import strategies as st

from compiler import (
    Event,
    Input,
    JobFinished,
    JobGraph,
    JobState,
    Playbook,
    PlaybookError,
    Start,
    Step,
    TaskClosed,
    TaskOpened,
    Tick,
    TimerCancelled,
    TimerSet,
    canonical_json,
    compile_playbook,
    input_from_json,
    task_id,
)

SETTINGS = settings(
    max_examples=200,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)

BASE = datetime(2026, 1, 5, 9, 0, tzinfo=UTC)
JOB = "job-1"
KEY = "prop"

SETTLED = frozenset({"done", "knocked", "dropped", "unreachable"})
LOST = frozenset({"knocked", "dropped", "unreachable"})
ALLOWED = {
    ("pending", "open"),
    ("pending", "unreachable"),
    ("pending", "dropped"),
    ("open", "done"),
    ("open", "knocked"),
    ("open", "dropped"),
}

# -- strategies: playbooks --------------------------------------------------------------

ATOMS = ["a", "b", "c", "COUNT(a) >= 2", "COUNT(b) < 2", "COUNT(c) == 1", "score > 2"]
WINDOWS = [None, "30m", "2h", "1d", "3d"]
DUES = [None, None, "10m", "1h", "2h", "1d"]


def _extend(children: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
    pairs = st.tuples(children, children)
    return st.one_of(
        children.map(lambda x: f"NOT ({x})"),
        pairs.map(lambda p: f"({p[0]}) AND ({p[1]})"),
        pairs.map(lambda p: f"({p[0]}) OR ({p[1]})"),
    )


# Strategies are built once, here: building them inside a draw costs more than the test.
EXPRESSIONS = st.recursive(st.sampled_from(ATOMS), _extend, max_leaves=4)
CONDITIONS = st.tuples(EXPRESSIONS, st.sampled_from(WINDOWS)).map(
    lambda p: p[0] if p[1] is None else f"{p[0]} WITHIN {p[1]}"
)
MAX_MILESTONES = 7
IDS = [f"m{i}" for i in range(MAX_MILESTONES)]
NEEDS = [st.just([])] + [
    st.lists(st.sampled_from(IDS[:i]), unique=True, max_size=3) for i in range(1, MAX_MILESTONES)
]
MERGES = st.sampled_from(["all", "any"])
DUE = st.sampled_from(DUES)
INTEGRATIONS = st.lists(st.sampled_from(["email", "crm"]), max_size=1)
GOALS = [
    st.lists(st.sampled_from(IDS[:n]), min_size=1, max_size=3, unique=True)
    for n in range(MAX_MILESTONES + 1)
]


@st.composite
def playbook_specs(draw: st.DrawFn) -> dict[str, Any]:
    n = draw(st.integers(1, MAX_MILESTONES))
    milestones: list[dict[str, Any]] = []
    for i in range(n):
        item: dict[str, Any] = {"id": IDS[i], "condition": draw(CONDITIONS)}
        needs = draw(NEEDS[i])
        if needs:
            item["needs"] = needs
            item["merge"] = draw(MERGES)
        due = draw(DUE)
        if due is not None:
            item["due"] = due
        item["integrations"] = draw(INTEGRATIONS)
        milestones.append(item)
    spec: dict[str, Any] = {
        "key": KEY,
        "version": 1,
        "instructions": "do it",
        "complete_when": draw(MERGES),
        "milestones": milestones,
    }
    if draw(st.integers(0, 3)) == 0:  # sometimes explicit goals (may be refused)
        spec["goals"] = draw(GOALS[n])
    return spec


@functools.lru_cache(maxsize=4096)
def _compile(text: str) -> Playbook | None:
    try:
        return compile_playbook(json.loads(text))
    except PlaybookError:
        return None


# -- strategies: inputs -----------------------------------------------------------------

GAPS = [
    timedelta(0),
    timedelta(milliseconds=500),
    timedelta(minutes=1),
    timedelta(minutes=10),
    timedelta(minutes=45),
    timedelta(hours=2),
    timedelta(hours=6),
    timedelta(days=1),
    timedelta(days=2),
    timedelta(days=4),
    timedelta(days=8),
    timedelta(days=40),
]
ACTIONS = ["a", "b", "c", "score", "other"]
KEYS = ["k1", "k2", "k3"]


def _event(action: str, value: int, room: bool, source: str, key: str | None, n: int) -> Event:
    return Event(
        action,
        value if action == "score" else None,
        {"room": "A"} if room else None,
        source,  # type: ignore[arg-type]
        key,
        f"ev{n}" if n >= 0 else None,
    )


EVENTS = st.builds(
    _event,
    st.sampled_from(ACTIONS),
    st.integers(0, 4),
    st.booleans(),
    st.sampled_from(["world", "world", "tool", "agent"]),
    st.none() | st.sampled_from(KEYS),
    st.integers(-5, 9),
)
INPUTS: st.SearchStrategy[Input] = st.one_of(EVENTS, EVENTS, st.just(Tick()))
GAP = st.sampled_from(GAPS)


@st.composite
def input_sequences(draw: st.DrawFn) -> list[tuple[datetime, Input]]:
    now = BASE
    out: list[tuple[datetime, Input]] = [(now, Start(JOB, KEY, {"name": "Ada"}, ("ada@x",)))]
    for _ in range(draw(st.integers(0, 14))):
        now += draw(GAP)
        out.append((now, draw(INPUTS)))
    if draw(st.booleans()):
        out.append((now + timedelta(days=200), Tick()))  # settle every window
    return out


class Case:
    """A compiled random playbook and the inputs to drive one job with."""

    def __init__(
        self, spec: dict[str, Any], playbook: Playbook, inputs: list[tuple[datetime, Input]]
    ) -> None:
        self.spec = spec
        self.playbook = playbook
        self.inputs = inputs

    def __repr__(self) -> str:  # readable falsifying examples
        rows = [f"  {(t - BASE)!s:>18} {i.to_json()}" for t, i in self.inputs]
        return f"Case(spec={json.dumps(self.spec)},\n inputs=[\n" + "\n".join(rows) + "])"


@st.composite
def cases(draw: st.DrawFn) -> Case:
    spec = draw(playbook_specs())
    playbook = _compile(json.dumps(spec, sort_keys=True))
    assume(playbook is not None)  # refused, e.g. 'leads to no goal'
    assert playbook is not None
    return Case(spec, playbook, draw(input_sequences()))


# -- helpers ----------------------------------------------------------------------------


def run(graph: JobGraph, inputs: list[tuple[datetime, Input]]) -> list[Step]:
    state: JobState | None = None
    steps = []
    for now, inp in inputs:
        step = graph.next(state, now, inp)
        steps.append(step)
        state = step.state
    return steps


def record(step: Step) -> bytes:
    return canonical_json(step.to_json())


def statuses(state: JobState | None, playbook: Playbook) -> dict[str, str]:
    if state is None:
        return {m.id: "pending" for m in playbook.milestones}
    return {k: v.status for k, v in state.milestones.items()}


def goals_decided(playbook: Playbook, status: dict[str, str]) -> bool:
    """The job's goals are met or can no longer be met (docs/playbooks.md), from statuses."""
    goals = [status[g] for g in playbook.goals]
    if playbook.complete_when == "all":
        return all(s == "done" for s in goals) or any(s in LOST for s in goals)
    return any(s == "done" for s in goals) or all(s in LOST for s in goals)


def can_matter(playbook: Playbook, status: dict[str, str], target: str) -> bool:
    """Does some unsettled goal depend on ``target`` through pending milestones?

    A path goal = x0 → x1 → … → xk = target along ``needs`` edges in which every
    x0 … x(k-1) is pending (only a milestone that is still waiting to open depends
    on its needs); the goal itself must be unsettled. Written from docs/playbooks.md
    ('How a job moves', pruning) alone.
    """
    needs = {m.id: m.needs for m in playbook.milestones}
    frontier = [g for g in playbook.goals if status[g] not in SETTLED]
    seen: set[str] = set()
    while frontier:
        node = frontier.pop()
        if node == target:
            return True
        if node in seen:
            continue
        seen.add(node)
        if status[node] == "pending":
            frontier.extend(needs[node])
    return False


def state_view(state: JobState | None) -> dict[str, Any]:
    """What evidence may change: milestones, tallies, timers and status."""
    if state is None:
        return {}
    data = state.to_json()
    return {k: data[k] for k in ("milestones", "tallies", "timers", "status")}


# -- (a) determinism --------------------------------------------------------------------


@SETTINGS
@given(cases())
def test_same_inputs_give_byte_identical_states_and_effects(case: Case) -> None:
    first = run(JobGraph(case.playbook), case.inputs)
    fresh = compile_playbook(json.loads(json.dumps(case.spec)))
    second = run(JobGraph(fresh), case.inputs)
    assert len(first) == len(second)
    for one, two in zip(first, second, strict=True):
        assert one.state is not None
        assert two.state is not None
        assert one.state.to_bytes() == two.state.to_bytes()
        assert one.state.hash == two.state.hash
        assert [e.to_json() for e in one.effects] == [e.to_json() for e in two.effects]
        assert record(one) == record(two)


# -- (b) statuses are monotone ----------------------------------------------------------


@SETTINGS
@given(cases())
def test_statuses_only_move_forward(case: Case) -> None:
    steps = run(JobGraph(case.playbook), case.inputs)
    ended: str | None = None
    settled: dict[str, bytes] = {}
    finished = 0
    prev: JobState | None = None
    for step in steps:
        state = step.state
        assert state is not None
        assert state.status in ("running", "done", "failed")  # never both done and failed
        finished += sum(isinstance(e, JobFinished) for e in step.effects)
        if ended is not None:
            assert state.status == ended, "an ended job changed status"
            assert not step.transitions
            assert not step.effects
        elif state.status != "running":
            ended = state.status
            assert state.ended_at is not None
            assert state.ended_at <= step.now  # at the input, or at a timer before it
            assert prev is None or prev.updated_at is None or prev.updated_at <= state.ended_at
            assert [e.status for e in step.effects if isinstance(e, JobFinished)] == [ended]
            assert not [m for m, s in statuses(state, case.playbook).items() if s not in SETTLED]
        current = statuses(prev, case.playbook)
        for t in step.transitions:
            assert (t.before, t.after) in ALLOWED, t
            assert current[t.milestone] == t.before, t
            current[t.milestone] = t.after
        assert current == statuses(state, case.playbook)
        for ident, ms in state.milestones.items():
            raw = canonical_json(ms.to_json())
            if ident in settled:
                assert raw == settled[ident], f"settled milestone {ident} changed"
            elif ms.status in SETTLED:
                settled[ident] = raw
        prev = state
    assert finished == (0 if ended is None else 1)


# -- (c) pruning drops only what cannot matter ------------------------------------------


@SETTINGS
@given(cases())
def test_a_dropped_milestone_could_not_have_mattered(case: Case) -> None:
    steps = run(JobGraph(case.playbook), case.inputs)
    prev: JobState | None = None
    for step in steps:
        current = statuses(prev, case.playbook)
        for t in step.transitions:  # replay the step's transitions, in order
            if t.after == "dropped":
                ended = goals_decided(case.playbook, current)
                assert ended or not can_matter(case.playbook, current, t.milestone), (
                    f"{t.milestone} dropped at {t.at} while a goal still depends on it: {current}"
                )
            current[t.milestone] = t.after
        state = step.state
        assert state is not None
        after = statuses(state, case.playbook)
        if state.status == "running":  # and nothing that cannot matter is left behind
            for ident, status in after.items():
                if status not in SETTLED:
                    assert can_matter(case.playbook, after, ident), (ident, after)
        prev = state


# -- (d) replay from serialised states --------------------------------------------------


@SETTINGS
@given(cases())
def test_json_built_from_the_previous_state_equals_json_built_afresh(case: Case) -> None:
    # The engine hashes every state as it is decided, so each state's JSON is built
    # from its predecessor's, reusing every part (milestone, instant, tally, timer)
    # the two share. It must be exactly the JSON built from nothing.
    graph = JobGraph(case.playbook)
    state: JobState | None = None
    for now, inp in case.inputs:
        step = graph.next(state, now, inp)
        if step.state is not None and step.state is not state:
            assert step.state.json() == step.state.to_json()
            assert step.state.to_bytes() == canonical_json(step.state.to_json())
        state = step.state


@SETTINGS
@given(cases())
def test_replaying_from_serialised_states_reproduces_every_step(case: Case) -> None:
    graph = JobGraph(case.playbook)
    steps = run(graph, case.inputs)
    log = [(now, inp.to_json()) for now, inp in case.inputs]  # what a step log holds
    stored = [json.dumps(s.state.to_json()) for s in steps if s.state is not None]
    assert len(stored) == len(steps)
    for i, ((now, raw_input), step) in enumerate(zip(log, steps, strict=True)):
        assert step.state is not None
        restored_now = JobState.from_json(json.loads(stored[i]))
        assert restored_now.to_bytes() == step.state.to_bytes()
        assert JobState.from_bytes(step.state.to_bytes()).hash == step.state.hash
        previous = JobState.from_json(json.loads(stored[i - 1])) if i else None
        again = graph.next(previous, now, input_from_json(orjson.loads(orjson.dumps(raw_input))))
        assert again.state is not None
        assert again.state.hash == step.state.hash
        assert record(again) == record(step)


# -- (e) agent events are not evidence --------------------------------------------------


@SETTINGS
@given(cases())
def test_an_agent_event_changes_no_milestone_or_tally(case: Case) -> None:
    graph = JobGraph(case.playbook)
    steps = run(graph, case.inputs)
    prev: JobState | None = None
    for (now, inp), step in zip(case.inputs, steps, strict=True):
        if isinstance(inp, Event) and inp.source == "agent" and step.duplicate:
            assert step.state is prev  # a re-delivery applies nothing (not even timers)
            assert not step.effects
        elif isinstance(inp, Event) and inp.source == "agent":
            as_tick = graph.next(prev, now, Tick())
            assert state_view(step.state) == state_view(as_tick.state)
            assert [e.to_json() for e in step.effects] == [e.to_json() for e in as_tick.effects]
            assert [t.to_json() for t in step.transitions] == [
                t.to_json() for t in as_tick.transitions
            ]
            # the agent's claim is still recorded (kept in the log and the audit trail)
            assert step.state is not None
            assert prev is not None
            assert step.state.events == prev.events + 1
        prev = step.state


def _without_agents(inputs: list[tuple[datetime, Input]]) -> list[tuple[datetime, Input]]:
    """Each agent event replaced by a tick at its instant (which fires the same timers)."""
    return [(t, Tick() if isinstance(i, Event) and i.source == "agent" else i) for t, i in inputs]


def _outcome(graph: JobGraph, inputs: list[tuple[datetime, Input]]) -> dict[str, Any]:
    """Where the job stands after ``inputs`` and a tick at the last instant (a
    duplicate fires no timers, a tick does: the tick makes the two runs comparable)."""
    steps = run(graph, [*inputs, (inputs[-1][0], Tick())])
    state = steps[-1].state
    assert state is not None
    return {
        "status": state.status,
        "milestones": {k: (v.status, v.outcome, v.settled_at) for k, v in state.milestones.items()},
        "counts": {k: v.count for k, v in state.tallies.items()},
    }


@SETTINGS
@given(cases())
def test_a_run_without_its_agent_events_ends_the_same(case: Case) -> None:
    """Whole-run form of (e), with agent events keyed from their own key space."""
    inputs = [
        (t, Event(i.action, i.value, i.properties, "agent", f"agent-{i.idempotency_key}", i.id))
        if isinstance(i, Event) and i.source == "agent" and i.idempotency_key
        else (t, i)
        for t, i in case.inputs
    ]
    graph = JobGraph(case.playbook)
    assert _outcome(graph, inputs) == _outcome(graph, _without_agents(inputs))


def _minimal_key_collision() -> Case:
    spec = {"key": KEY, "version": 1, "milestones": [{"id": "m0", "condition": "a"}]}
    playbook = _compile(json.dumps(spec, sort_keys=True))
    assert playbook is not None
    return Case(
        spec,
        playbook,
        [
            (BASE, Start(JOB, KEY)),
            (BASE, Event("a", source="agent", idempotency_key="k1")),
            (BASE, Event("a", source="world", idempotency_key="k1")),
        ],
    )


@SETTINGS
@given(cases())
@example(_minimal_key_collision())
def test_an_agent_event_cannot_suppress_evidence_by_its_idempotency_key(case: Case) -> None:
    """(e) with agent and world events drawing keys from one pool.

    Minimal falsifying example (the @example above), playbook m0: ``a``:
        0s  job.start
        0s  event a, source=agent, idempotency_key=k1
        0s  event a, source=world, idempotency_key=k1  → refused as a duplicate
    m0 stays open (and times out after 30d, failing the job); with the agent's
    event replaced by a tick, m0 is done and the job is done.
    """
    graph = JobGraph(case.playbook)
    assert _outcome(graph, case.inputs) == _outcome(graph, _without_agents(case.inputs))


# -- (f) tasks --------------------------------------------------------------------------


@SETTINGS
@given(cases())
def test_each_task_opens_once_and_closes_at_most_once_after(case: Case) -> None:
    steps = run(JobGraph(case.playbook), case.inputs)
    opened: set[str] = set()
    open_now: set[str] = set()
    closed: set[str] = set()
    for step in steps:
        state = step.state
        assert state is not None
        for effect in step.effects:
            if isinstance(effect, TaskOpened):
                assert effect.task_id not in opened, f"task {effect.task_id} opened twice"
                opened.add(effect.task_id)
                open_now.add(effect.task_id)
                ms = state.milestones[effect.milestone]
                assert effect.deadline == ms.deadline
                assert effect.at == ms.task_at
            elif isinstance(effect, TaskClosed):
                assert effect.task_id in open_now, f"task {effect.task_id} closed, not open"
                assert effect.task_id not in closed, f"task {effect.task_id} closed twice"
                open_now.discard(effect.task_id)
                closed.add(effect.task_id)
                ms = state.milestones[effect.milestone]
                assert ms.status in SETTLED
                assert effect.outcome == ms.outcome
        flagged = {task_id(JOB, k) for k, v in state.milestones.items() if v.task_open}
        assert open_now == flagged
        if state.status != "running":
            assert not open_now, "a task outlived its job"


# -- (g) effects describe the work that remains -----------------------------------------


@SETTINGS
@given(cases())
def test_effects_are_only_the_work_that_remains(case: Case) -> None:
    graph = JobGraph(case.playbook)
    steps = run(graph, case.inputs)
    opened_in: dict[str, int] = {}
    finished = False
    for number, step in enumerate(steps):
        state = step.state
        assert state is not None
        if finished:
            assert step.effects == (), "an effect after the job finished"
        opened = [e for e in step.effects if isinstance(e, TaskOpened)]
        closed = [e for e in step.effects if isinstance(e, TaskClosed)]
        both = {e.task_id for e in opened} & {e.task_id for e in closed}
        assert not both, f"opened and closed in one step: {both}"
        for e in opened:
            assert state.milestones[e.milestone].status == "open"
            assert e.frontier == graph.frontier(state)
            assert e.milestone in e.frontier
            opened_in[e.task_id] = number
        for e in closed:
            assert opened_in[e.task_id] < number
        set_ = [e.timer for e in step.effects if isinstance(e, TimerSet)]
        cancelled = [e.timer for e in step.effects if isinstance(e, TimerCancelled)]
        assert not [t for t in set_ if t in cancelled], "a timer set and cancelled in one step"
        assert all(t in state.timers for t in set_)
        assert not [t for t in cancelled if t in state.timers]
        finished = finished or any(isinstance(e, JobFinished) for e in step.effects)
