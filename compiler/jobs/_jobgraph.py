"""The decision core: ``JobGraph.next(state, now, input) -> Step``
(docs/playbooks.md, 'How a job moves'; docs/decisions.md).

Every milestone transition rule lives in this file, in ``_Decision``:

  pending → open         its merge is satisfied (all: every need done; any: one)
  pending → unreachable  its merge can no longer be satisfied
  open    → done         its monitor says TRUE (open world, or at the window's close)
  open    → knocked      its monitor says FALSE (open world: outcome ``knocked``;
                         at the window's close: outcome ``timed_out``)
  open | pending → dropped
                         it can no longer matter to any unsettled goal (pruning),
                         or the job ended

The job is ``done`` when its goals are met per ``complete_when`` (or
``completed_with_override``, when a milestone marked so is done then),
``failed`` when that became impossible. Within one instant the rules run to a fixed point
in rank order, so the result never depends on dict order or on timing.

Order inside a step (docs/decisions.md, "One step"):

1. timers due at or before ``now`` fire, one instant at a time, earliest
   first; at each instant the rules run to a fixed point;
2. the input is recorded, and the rules run to a fixed point at ``now``.

In each pass of the rules, open milestones whose facts moved are judged and
pending ones opened or made unreachable, in rank order; then the job's status
is decided, then what can no longer matter is dropped. A milestone opened in a
pass is first judged in the next pass, after that pruning: so the losing branch
of an ``any`` merge is dropped even when its evidence is already in. The job's
status is decided after every monitor has seen the input; when the job ends,
every open or pending milestone is dropped.

**Effects describe the work that remains.** They are not collected as the
rules run but taken, when the step is over, as the difference between the
state before and after it (``_Decision.difference``): a ``task.opened`` for
each milestone open at the end whose task had not been emitted (or whose
``due`` came), with the frontier as it is at the end; a ``task.closed`` for
each emitted task whose milestone is no longer open; a timer set or cancelled
only when it is in one state and not the other. So a milestone that opens and
settles (or is dropped) within one step emits no task, a job that ends opens
none, and a timer set and cancelled in one step appears in neither list. Its
transitions are in the decision record all the same. Before them all comes the
input's own effect, if any: a ``fact.remembered`` for an event its playbook
remembers (``_Decision.record``; docs/memory.md, "What is remembered").
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any, Final

from topics import GROUNDED_SOURCES, JobStatus, MilestoneStatus, TaskOutcome, subject_key

from compiler._errors import GraphMismatch
from compiler._time import require_aware
from compiler.conditions._condition import Tally, count
from compiler.conditions._verdict import Verdict
from compiler.jobs._effects import (
    Effect,
    FactRemembered,
    JobFinished,
    Step,
    TaskClosed,
    TaskOpened,
    TimerCancelled,
    TimerSet,
    Transition,
    Verdicts,
)
from compiler.jobs._inputs import Event, Input, Start, Tick
from compiler.jobs._playbook import Milestone, Playbook
from compiler.jobs._state import (
    DONE,
    DROPPED,
    KNOCKED,
    LOST,
    MAX_REMEMBERED_KEYS,
    OPEN,
    PENDING,
    RUNNING,
    SETTLED,
    UNREACHABLE,
    JobState,
    MilestoneState,
    Timer,
)

__all__ = ["JobGraph", "refusal"]

#: The status a milestone settles in, by how it ended.
_SETTLES_AS: Final[dict[TaskOutcome, MilestoneStatus]] = {
    TaskOutcome.DONE: DONE,
    TaskOutcome.KNOCKED: KNOCKED,
    TaskOutcome.TIMED_OUT: KNOCKED,
    TaskOutcome.DROPPED: DROPPED,
}

_PENDING = MilestoneState()  # a value: every new job's milestones share it


class JobGraph:
    """The pure decision function for jobs on one playbook version."""

    def __init__(self, playbook: Playbook) -> None:
        self.playbook = playbook
        self._pinned = (playbook.key, playbook.version)  # what a job must be pinned to

    def frontier(self, state: JobState) -> tuple[str, ...]:
        """Open milestones in rank order: the first is the next best step."""
        return _frontier(self.playbook, state.milestones)

    def next(self, state: JobState | None, now: datetime, input: Input) -> Step:
        """Apply ``input`` at ``now``. Pure: same arguments, byte-identical result.

        Timers due at or before ``now`` fire first, in time order; then the input
        applies. A duplicate event, an input the job cannot take, or a tick with
        nothing due returns a step without effects and the state unchanged.
        """
        now = require_aware(now)
        refused = refusal(state, input)
        if refused is not None:
            return Step(state, now, input, refused=refused)
        if isinstance(input, Start):
            if input.playbook_key != self.playbook.key:
                return Step(
                    None,
                    now,
                    input,
                    refused=f"this graph runs playbook {self.playbook.key!r}, "
                    f"not {input.playbook_key!r}",
                )
            return _Decision.start(self.playbook, input, now)
        assert state is not None  # refusal() refuses any other input without a job
        if (state.playbook_key, state.playbook_version) != self._pinned:
            raise GraphMismatch(
                state.key, (state.playbook_key, state.playbook_version), self._pinned
            )
        if (
            isinstance(input, Event)
            and input.idempotency_key is not None
            and remembered_key(input) in state.recent_keys
        ):
            return Step(state, now, input, duplicate=True, frontier=self.frontier(state))
        if now < (state.updated_at or state.started_at):
            # The clock never runs backwards for one job: a late record is decided
            # at the job's latest instant, so timers never fire twice or out of order.
            now = state.updated_at or state.started_at
        if isinstance(input, Tick) and not (state.timers and state.timers[0].at <= now):
            return Step(state, now, input, noop=True, frontier=self.frontier(state))
        decision = _Decision(self.playbook, state)
        decision.fire_timers(now)
        if isinstance(input, Event):
            decision.record(input, now)
        return decision.finish(now, input)


def refusal(state: JobState | None, input: Input) -> str | None:
    """Why ``input`` cannot apply to a job in ``state`` whatever its playbook
    says (None: it may): a second start, or an event or tick for a job never
    started. ``JobGraph.next`` refuses these; a caller that needs the job's
    graph first (the stream engine) asks here before it looks one up."""
    if isinstance(input, Start):
        return f"job {state.key!r} already exists" if state is not None else None
    if state is None:
        return "unknown job: no job.start was applied"
    return None


def remembered_key(event: Event) -> str:
    """How a job remembers an event's idempotency key: per source, so that an
    agent's event can never use up the key of the world's evidence (a model that
    guesses or reuses a key must not be able to block a real confirmation)."""
    return f"{event.source}:{event.idempotency_key}"


class _Decision:
    """One call of ``next``: a working copy of the state, and what happened."""

    def __init__(self, playbook: Playbook, state: JobState) -> None:
        self.playbook = playbook
        self.state = state
        self.status: JobStatus = state.status
        self.ended_at = state.ended_at
        self.milestones: dict[str, MilestoneState] = dict(state.milestones)
        self.tallies: dict[str, Tally] = dict(state.tallies)
        self.timers: list[Timer] = list(state.timers)
        self.events = state.events
        self.recent_keys = state.recent_keys
        self.fired: list[Timer] = []
        self.verdicts: list[Verdicts] = []
        self.transitions: list[Transition] = []
        self.finished: JobFinished | None = None
        self.remembered: FactRemembered | None = None
        # Milestones in the order their task came due, and the order they
        # settled: the order of the step's task effects.
        self._due_order: list[str] = []
        self._settle_order: list[str] = []
        # Open milestones whose verdict may have changed: an open-world verdict is
        # a function of the tallies, so only a new occurrence of a fact a
        # condition reads, or opening, can change it. The rest are not re-run.
        self._stale: set[str] = set()
        # Milestone moves so far. The job's status, pruning and a pending
        # milestone's merge are functions of milestone statuses alone: while
        # nothing has moved since they were last computed, they are not again.
        self._moves = 0
        self._merge_checked: dict[str, int] = {}
        self._frontier_at: tuple[int, tuple[str, ...]] = (-1, ())

    # -- inputs -----------------------------------------------------------------

    @classmethod
    def start(cls, playbook: Playbook, start: Start, now: datetime) -> Step:
        state = JobState(
            key=start.key,
            playbook_key=playbook.key,
            playbook_version=playbook.version,
            started_at=now,
            subject=dict(start.subject),
            contacts=tuple(start.contacts),
            milestones=dict.fromkeys((m.id for m in playbook.milestones), _PENDING),
            tallies={},
        )
        decision = cls(playbook, state)
        return decision.finish(now, start)

    def fire_timers(self, now: datetime) -> None:
        """Fire every timer due at or before ``now``, one instant at a time."""
        while self.timers and self.timers[0].at <= now and self.status == RUNNING:
            instant = self.timers[0].at
            group: list[Timer] = []
            while self.timers and self.timers[0].at == instant:
                group.append(self.timers.pop(0))
            self.fired.extend(group)
            for timer in group:  # already in Timer.order: settlements first
                milestone = self.playbook.by_id[timer.milestone]
                if self.milestones[timer.milestone].status != OPEN:
                    continue
                if timer.kind == "settle":
                    self._settle_at_close(milestone, instant)
                else:
                    self._emit_task(milestone, instant)
            self._run_rules(instant)

    def record(self, event: Event, now: datetime) -> None:
        """Record an event; unless it is an agent's claim, count it as evidence."""
        self.events += 1
        if event.idempotency_key is not None:
            keys = (*self.recent_keys, remembered_key(event))
            self.recent_keys = keys[-MAX_REMEMBERED_KEYS:]
        remembers = self.playbook.remembers
        if remembers and event.action in remembers and event.source in GROUNDED_SOURCES:
            self._remember(event, now)
        if event.source == "agent" or self.status != RUNNING:
            return
        fact = event.fact(fallback_id=f"{self.state.key}#{self.state.seq + 1}")
        count(self.playbook.atoms_by_fact.get(fact.name, ()), self.tallies, fact)
        self._stale |= self.playbook.milestones_by_fact.get(fact.name, frozenset())

    def _remember(self, event: Event, now: datetime) -> None:
        """The playbook remembers this world or tool event: it is a fact about
        the job's subject, if the job has one (docs/memory.md, "What is
        remembered"). Its id is the one verdicts cite it by."""
        state = self.state
        subject = subject_key(dict(state.subject), list(state.contacts))
        if subject is None:
            return
        self.remembered = FactRemembered(
            subject,
            event.action,
            event.value,
            event.properties,
            event.source,
            event.id or event.idempotency_key or f"{state.key}#{state.seq + 1}",
            state.key,
            now,
        )

    def finish(self, now: datetime, input: Input) -> Step:
        """Run the rules at ``now`` and package the step."""
        self._run_rules(now)
        before = self.state
        state = JobState(
            key=before.key,
            playbook_key=before.playbook_key,
            playbook_version=before.playbook_version,
            started_at=before.started_at,
            status=self.status,
            seq=before.seq + 1,
            updated_at=now,
            ended_at=self.ended_at,
            events=self.events,
            subject=before.subject,
            contacts=before.contacts,
            milestones=self.milestones,
            tallies=self.tallies,
            timers=tuple(self.timers),
            recent_keys=self.recent_keys,
        ).derived_from(before)
        frontier = self._frontier()
        return Step(
            state,
            now,
            input,
            fired=tuple(self.fired),
            verdicts=tuple(self.verdicts),
            transitions=tuple(self.transitions),
            effects=self.difference(frontier),
            frontier=frontier,
        )

    # -- the rules ----------------------------------------------------------------

    def _run_rules(self, at: datetime) -> None:
        """Apply every rule at instant ``at`` until nothing changes."""
        evaluated: dict[str, Verdicts] = {}
        changed = self.status == RUNNING
        job_checked = -1  # self._moves when the job's status and pruning last ran
        merge_checked = self._merge_checked
        while changed:
            changed = False
            for milestone in self.playbook.milestones:
                status = self.milestones[milestone.id].status
                if status == OPEN:
                    if milestone.id in self._stale:
                        self._stale.discard(milestone.id)
                        changed |= self._evaluate(milestone, at, evaluated)
                elif status == PENDING and merge_checked.get(milestone.id) != self._moves:
                    merge_checked[milestone.id] = self._moves
                    changed |= self._open_or_unreachable(milestone, at)
            if job_checked != self._moves:
                job_checked = self._moves
                if self._decide_job(at):
                    break
                changed |= self._prune(at)
        self.verdicts.extend(evaluated[m.id] for m in self.playbook.milestones if m.id in evaluated)

    def _evaluate(self, milestone: Milestone, at: datetime, seen: dict[str, Verdicts]) -> bool:
        verdict, data = milestone.condition.judge(self.tallies, closed=False)
        seen[milestone.id] = Verdicts(milestone.id, at, data)
        if verdict is Verdict.TRUE:
            self._settle(milestone, TaskOutcome.DONE, at, "condition TRUE", data)
            return True
        if verdict is Verdict.FALSE:
            self._settle(milestone, TaskOutcome.KNOCKED, at, "condition FALSE", data)
            return True
        self.milestones[milestone.id] = self.milestones[milestone.id].with_(explanation=data)
        return False

    def _settle_at_close(self, milestone: Milestone, at: datetime) -> None:
        """The window closed: the world is closed and the condition settles."""
        verdict, data = milestone.condition.judge(self.tallies, closed=True)
        self.verdicts.append(Verdicts(milestone.id, at, data))
        if verdict is Verdict.TRUE:
            self._settle(milestone, TaskOutcome.DONE, at, "window closed: condition TRUE", data)
        else:
            self._settle(
                milestone,
                TaskOutcome.TIMED_OUT,
                at,
                "window closed: condition FALSE",
                data,
            )

    def _open_or_unreachable(self, milestone: Milestone, at: datetime) -> bool:
        needs = [self.milestones[n].status for n in milestone.needs]
        if milestone.merge == "all":
            ready = all(s == DONE for s in needs)
            lost = any(s in LOST for s in needs)
        else:
            ready = any(s == DONE for s in needs)
            lost = all(s in LOST for s in needs)
        if ready:
            self._open(milestone, at)
            return True
        if lost:
            which = ", ".join(n for n in milestone.needs if self.milestones[n].status in LOST)
            self._move(milestone.id, UNREACHABLE, at, f"merge {milestone.merge} lost: {which}")
            return True
        return False

    def _open(self, milestone: Milestone, at: datetime) -> None:
        deadline = at + milestone.condition.window
        task_at = at + milestone.due if milestone.due is not None else at
        self._move(
            milestone.id,
            OPEN,
            at,
            "job started" if not milestone.needs else f"merge {milestone.merge} satisfied",
            opened_at=at,
            deadline=deadline,
            task_at=task_at,
        )
        self._set_timer(Timer(deadline, "settle", milestone.id))
        self._stale.add(milestone.id)  # evidence may have arrived before it opened
        if milestone.due is not None:
            self._set_timer(Timer(task_at, "due", milestone.id))
        else:
            self._emit_task(milestone, at)

    def _emit_task(self, milestone: Milestone, at: datetime) -> None:
        """The milestone's task is due (``at`` is its ``task_at``); it goes out
        as ``task.opened`` if the milestone is still open when the step ends."""
        self.milestones[milestone.id] = self.milestones[milestone.id].with_(task_open=True)
        self._due_order.append(milestone.id)

    def _settle(
        self,
        milestone: Milestone,
        outcome: TaskOutcome,
        at: datetime,
        reason: str,
        explanation: dict[str, object] | None = None,
    ) -> None:
        self.timers = [t for t in self.timers if t.milestone != milestone.id]
        self._settle_order.append(milestone.id)
        fields: dict[str, Any] = {"task_open": False, "settled_at": at, "outcome": outcome}
        if explanation is not None:
            fields["explanation"] = explanation
        self._move(milestone.id, _SETTLES_AS[outcome], at, reason, **fields)

    def _decide_job(self, at: datetime) -> bool:
        """Decide the job's status; when it ends, drop everything still unsettled."""
        if self.status != RUNNING:
            return True
        goals = [self.milestones[g].status for g in self.playbook.goals]
        if self.playbook.complete_when == "all":
            done = all(s == DONE for s in goals)
            failed = any(s in LOST for s in goals)
        else:
            done = any(s == DONE for s in goals)
            failed = all(s in LOST for s in goals)
        if not (done or failed):
            return False
        self.status = self._done_as() if done else JobStatus.FAILED
        self.ended_at = at
        for milestone in self.playbook.milestones:
            if self.milestones[milestone.id].status not in SETTLED:
                self._settle(milestone, TaskOutcome.DROPPED, at, f"job {self.status.value}")
        self.finished = JobFinished(self.state.key, self.status, at)
        return True

    def _done_as(self) -> JobStatus:
        """How a job whose goals are met ends: ``completed_with_override`` when a
        milestone marked so is done, else ``done`` (docs/playbooks.md, "Ending
        with an override"): an override accepted on the way is never a plain success."""
        for milestone in self.playbook.overrides:
            if self.milestones[milestone].status == DONE:
                return JobStatus.COMPLETED_WITH_OVERRIDE
        return JobStatus.DONE

    def _prune(self, at: datetime) -> bool:
        """Drop what can no longer matter to any unsettled goal."""
        matters: set[str] = set()
        stack = [g for g in self.playbook.goals if self.milestones[g].status not in SETTLED]
        while stack:
            node = stack.pop()
            if node in matters:
                continue
            matters.add(node)
            # Only a milestone still waiting to open depends on its needs.
            if self.milestones[node].status == PENDING:
                stack.extend(
                    n
                    for n in self.playbook.by_id[node].needs
                    if self.milestones[n].status not in SETTLED
                )
        dropped = False
        for milestone in self.playbook.milestones:
            if self.milestones[milestone.id].status in SETTLED or milestone.id in matters:
                continue
            self._settle(milestone, TaskOutcome.DROPPED, at, "can no longer matter to a goal")
            dropped = True
        return dropped

    # -- bookkeeping --------------------------------------------------------------

    def _move(
        self, milestone: str, status: MilestoneStatus, at: datetime, reason: str, **fields: Any
    ) -> None:
        before = self.milestones[milestone]
        self.milestones[milestone] = before.with_(status=status, **fields)
        self._moves += 1
        self.transitions.append(Transition(milestone, before.status, status, at, reason))

    def _set_timer(self, timer: Timer) -> None:
        self.timers.append(timer)
        self.timers.sort(key=lambda t: t.order)

    def difference(self, frontier: tuple[str, ...]) -> tuple[Effect, ...]:
        """The effects of the step: what it changed between the state it began
        with and the one it ends with (see the module's docstring). Tasks closed
        first, in the order their milestones settled; then timers cancelled and
        set; tasks opened, in the order they came due; the job finished. Before
        them all, the fact the step's event made remembered, if any."""
        before = self.state.milestones
        key = self.state.key
        # The remembered fact first: it is the input's, before what the rules made of it.
        effects: list[Effect] = [self.remembered] if self.remembered is not None else []
        for mid in self._settle_order:
            now = self.milestones[mid]
            if before[mid].task_open and not now.task_open:
                assert now.settled_at is not None
                outcome = now.outcome if now.outcome is not None else TaskOutcome.DROPPED
                effects.append(TaskClosed(key, mid, now.settled_at, outcome))
        previous = self.state.timers
        if previous or self.timers:
            effects.extend(
                TimerCancelled(t) for t in previous if t not in self.timers and t not in self.fired
            )
            effects.extend(TimerSet(t) for t in self.timers if t not in previous)
        for mid in self._due_order:
            now = self.milestones[mid]
            if now.task_open and not before[mid].task_open:
                milestone = self.playbook.by_id[mid]
                assert now.task_at is not None
                assert now.deadline is not None
                effects.append(
                    TaskOpened(
                        key,
                        mid,
                        now.task_at,
                        milestone.instructions,
                        self.playbook.spec.instructions,
                        milestone.integrations,
                        now.deadline,
                        frontier,
                    )
                )
        if self.finished is not None:
            effects.append(self.finished)
        return tuple(effects)

    def _frontier(self) -> tuple[str, ...]:
        if self._frontier_at[0] != self._moves:
            self._frontier_at = (self._moves, _frontier(self.playbook, self.milestones))
        return self._frontier_at[1]


def _frontier(playbook: Playbook, milestones: Mapping[str, MilestoneState]) -> tuple[str, ...]:
    """Open milestones in rank order (topological depth, then playbook order)."""
    return tuple(m.id for m in playbook.milestones if milestones[m.id].status == OPEN)
