"""Playbooks: the spec as authors write it (YAML or JSON), its validation with
positions, and the compiled graph the decision core runs (docs/playbooks.md)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StrictInt,
    StrictStr,
    ValidationError,
    field_validator,
)

from compiler._durations import parse_duration
from compiler._errors import ConditionError, LemongraphError, caret_excerpt
from compiler._source import Located, Position, field_problem, load_located
from compiler.conditions._ast import Atom
from compiler.conditions._condition import Condition, compile_condition
from compiler.conditions._printer import print_atom

__all__ = [
    "Milestone",
    "MilestoneSpec",
    "Playbook",
    "PlaybookError",
    "PlaybookProblem",
    "PlaybookSpec",
    "compile_playbook",
    "load_playbook",
]

_IDENT = r"^[A-Za-z_][A-Za-z0-9_\-]*$"
_KEY = r"^[A-Za-z0-9_][A-Za-z0-9_.\-]*$"
#: What a milestone's ``ends`` may say: how a job whose goals are met through
#: it ends instead of ``done`` (docs/playbooks.md, "Ending with an override").
ENDS = ("completed_with_override",)
#: The longest event action (topics.InboxEvent): a longer ``remember`` name
#: could never be remembered.
_ACTION_MAX = 200


class MilestoneSpec(BaseModel):
    """One milestone as written in a playbook."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str = Field(pattern=_IDENT, max_length=100)
    instructions: str = ""
    condition: StrictStr
    needs: tuple[str, ...] = ()
    merge: Literal["all", "any"] = "all"
    integrations: tuple[str, ...] = ()
    due: str | None = None
    #: The flow that does the milestone's work (``flows/NAME.yaml``, docs/flows.md).
    flow: str | None = Field(None, pattern=_IDENT, max_length=100)
    #: How the job ends, instead of ``done``, when this milestone is done when
    #: its goals are met (docs/playbooks.md, "Ending with an override").
    ends: StrictStr | None = None

    @field_validator("ends")
    @classmethod
    def _ends_is_known(cls, value: str | None) -> str | None:
        if value is not None and value not in ENDS:
            raise ValueError(
                f"{value!r} is not a way for a job to end: write {' or '.join(ENDS)} "
                "(a job that reaches its goals through this milestone ends so, never done)"
            )
        return value

    @field_validator("due")
    @classmethod
    def _due_is_a_duration(cls, value: str | None) -> str | None:
        if value is not None and parse_duration(value) <= timedelta(0):
            raise ValueError("due must be longer than zero")
        return value


class PlaybookSpec(BaseModel):
    """A playbook as written: data, versioned, validated before use."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    key: str = Field(pattern=_KEY, max_length=200)
    version: StrictInt = Field(ge=1)
    name: str = ""
    instructions: str = ""
    complete_when: Literal["all", "any"] = "all"
    goals: tuple[str, ...] | None = None
    milestones: tuple[MilestoneSpec, ...] = Field(min_length=1)
    #: The event actions whose facts enter the job's subject's profile when the
    #: world or a tool says them (docs/playbooks.md, "Remembering";
    #: docs/memory.md, "What is remembered").
    #: None (not an empty list) when not given, so the spec of a playbook that
    #: remembers nothing reads back exactly as it did before ``remember`` existed.
    remember: tuple[StrictStr, ...] | None = None


@dataclass(frozen=True, slots=True)
class PlaybookProblem:
    """One thing wrong with a playbook, and where."""

    source: str
    message: str
    milestone: str | None = None
    line: int | None = None
    column: int | None = None
    excerpt: str | None = None

    def __str__(self) -> str:
        where = self.source
        if self.line is not None:
            where += f":{self.line}:{self.column}"
        head = f"{where}: " + (f"milestone {self.milestone}: " if self.milestone else "")
        text = head + self.message
        return f"{text}\n{self.excerpt}" if self.excerpt else text


class PlaybookError(LemongraphError):
    """A playbook that is refused. ``problems`` lists every reason found."""

    code = "invalid_playbook"

    def __init__(self, problems: list[PlaybookProblem]) -> None:
        self.problems = tuple(problems)
        super().__init__("\n".join(str(p) for p in problems))


@dataclass(frozen=True, slots=True)
class Milestone:
    """A compiled milestone: its condition compiled, its place in the graph known."""

    id: str
    index: int  # position in the playbook (ties in rank are broken by it)
    depth: int  # topological depth: 0 for roots
    instructions: str
    condition: Condition
    needs: tuple[str, ...]
    merge: Literal["all", "any"]
    integrations: tuple[str, ...]
    due: timedelta | None
    #: The condition's atoms with their canonical text (their key in job state).
    atom_keys: tuple[tuple[str, Atom], ...]
    #: The flow that does its work (docs/flows.md), if one is named.
    flow: str | None = None
    #: How the job ends instead of ``done`` when it is done then (``ENDS``).
    ends: str | None = None


@dataclass(frozen=True)
class Playbook:
    """A validated playbook, ready for :class:`JobGraph`."""

    spec: PlaybookSpec
    milestones: tuple[Milestone, ...]  # in rank order: depth, then playbook order
    goals: tuple[str, ...]
    by_id: Mapping[str, Milestone] = field(repr=False)
    #: Every distinct atom of every condition, by the fact name it reads.
    atoms_by_fact: Mapping[str, tuple[tuple[str, Atom], ...]] = field(repr=False)
    #: The milestones whose condition reads a fact, by the fact's name.
    milestones_by_fact: Mapping[str, frozenset[str]] = field(repr=False)
    #: The milestones marked ``ends: completed_with_override``, in rank order:
    #: one of them done when the goals are met makes the job end so, not done
    #: (docs/playbooks.md, "Ending with an override").
    overrides: tuple[str, ...] = ()
    #: The actions it remembers (``remember``): an applied world or tool event
    #: of one of them is a ``fact.remembered`` effect (docs/memory.md). Empty:
    #: the decision core does nothing more per event.
    remembers: frozenset[str] = frozenset()

    @property
    def key(self) -> str:
        """The key jobs start it by."""
        return self.spec.key

    @property
    def version(self) -> int:
        """The version a job pins."""
        return self.spec.version

    @property
    def complete_when(self) -> Literal["all", "any"]:
        """How the goals combine."""
        return self.spec.complete_when

    def to_json(self) -> dict[str, Any]:
        """The spec as JSON-ready data (what the registry topic carries)."""
        return self.spec.model_dump(mode="json", exclude_none=True)


def load_playbook(text: str, source: str = "<playbook>") -> Playbook:
    """Parse YAML or JSON text and compile it. Raises :class:`PlaybookError`
    (listing every problem with file, milestone, line and column)."""
    try:
        located = load_located(text, source)
    except LemongraphError as exc:
        line, column = getattr(exc, "line", None), getattr(exc, "column", None)
        reason = getattr(exc, "reason", exc.message)
        raise PlaybookError([PlaybookProblem(source, reason, None, line, column)]) from None
    return compile_playbook(located.data, source, located, check_due=True)


def compile_playbook(
    data: Any,
    source: str = "<playbook>",
    located: Located | None = None,
    *,
    check_due: bool = False,
) -> Playbook:
    """Validate playbook data (already parsed) and compile it. ``check_due``: also
    refuse a ``due`` not shorter than its window. Files (check, simulate, register:
    :func:`load_playbook`) and inline scenario playbooks are held to it; a spec
    read back from the playbooks topic is not, so that a version registered before
    the rule still loads."""
    return _Compiler(source, located, check_due).compile(data)


class _Compiler:
    def __init__(self, source: str, located: Located | None, check_due: bool) -> None:
        self.source = source
        self.located = located
        self.check_due = check_due
        self.problems: list[PlaybookProblem] = []

    def _where(self, path: tuple[str | int, ...]) -> Position | None:
        return self.located.position(path) if self.located else None

    def problem(
        self, message: str, path: tuple[str | int, ...] = (), milestone: str | None = None
    ) -> None:
        pos = self._where(path)
        excerpt = None
        if pos is not None and self.located is not None:
            excerpt = caret_excerpt(self.located.text, pos.line, pos.column)
        self.problems.append(
            PlaybookProblem(
                self.source,
                message,
                milestone,
                pos.line if pos else None,
                pos.column if pos else None,
                excerpt,
            )
        )

    def fail(self) -> PlaybookError:
        return PlaybookError(self.problems)

    def compile(self, data: Any) -> Playbook:
        spec = self._validate(data)
        conditions = self._conditions(spec)
        if self.check_due:
            self._due_in_window(spec, conditions)
        ids = self._unique_ids(spec)
        self._known_needs(spec, ids)
        goals = self._goals(spec, ids)
        self._remember(spec)
        if self.problems:
            raise self.fail()
        depth = self._depths(spec)
        if self.problems:  # cycles
            raise self.fail()
        self._leads_to_goal(spec, goals)
        if self.problems:
            raise self.fail()
        return self._build(spec, conditions, goals, depth)

    def _validate(self, data: Any) -> PlaybookSpec:
        if not isinstance(data, dict):
            self.problem("a playbook must be a mapping with key, version and milestones")
            raise self.fail()
        try:
            return PlaybookSpec.model_validate(data)
        except ValidationError as exc:
            errors = exc.errors()
            # A milestone that fails validation leaves pydantic's tuple empty and
            # so adds "milestones: at least 1 item": only true when none was given.
            if any(e["loc"][:1] == ("milestones",) and len(e["loc"]) > 1 for e in errors):
                errors = [
                    e
                    for e in errors
                    if tuple(e["loc"]) != ("milestones",) or e["type"] != "too_short"
                ]
            for err in errors:
                loc = tuple(err["loc"])
                milestone = _milestone_at(data, loc)
                known = MilestoneSpec.model_fields if loc[:1] == ("milestones",) else None
                fields = known if known is not None and len(loc) > 2 else PlaybookSpec.model_fields
                self.problem(field_problem(err, "playbook", fields), _path(loc), milestone)
            raise self.fail() from None

    def _conditions(self, spec: PlaybookSpec) -> dict[str, Condition]:
        out: dict[str, Condition] = {}
        for i, m in enumerate(spec.milestones):
            try:
                out[m.id] = compile_condition(m.condition)
            except ConditionError as exc:
                self._condition_problem(m.id, i, exc)
        return out

    def _condition_problem(self, milestone: str, index: int, exc: ConditionError) -> None:
        pos = self._where(("milestones", index, "condition"))
        if pos is None or self.located is None:
            self.problems.append(
                PlaybookProblem(
                    self.source,
                    f"condition: {exc.reason}",
                    milestone,
                    exc.line,
                    exc.column,
                    caret_excerpt(exc.text, exc.line, exc.column),
                )
            )
            return
        line, column = _condition_position(self.located.text, pos, exc.line, exc.column)
        self.problems.append(
            PlaybookProblem(
                self.source,
                f"condition: {exc.reason}",
                milestone,
                line,
                column,
                caret_excerpt(self.located.text, line, column),
            )
        )

    def _due_in_window(self, spec: PlaybookSpec, conditions: dict[str, Condition]) -> None:
        """A ``due`` not shorter than the window can never send its task: the
        window's close settles the milestone (done or timed out) first, and the
        settle timer fires before a due timer at the same instant."""
        for i, m in enumerate(spec.milestones):
            condition = conditions.get(m.id)
            if m.due is None or condition is None:
                continue
            due = parse_duration(m.due)
            if due < condition.window:
                continue
            within = condition.within
            window = (
                f"its window, WITHIN {within}"
                if within is not None
                else f"its window, the default {_days(condition.window)} (no WITHIN)"
            )
            self.problem(
                f"due: {m.due} is not shorter than {window}: the milestone settles when "
                "its window closes, so its task could never go out; make due shorter "
                "or the window longer",
                ("milestones", i, "due"),
                m.id,
            )

    def _unique_ids(self, spec: PlaybookSpec) -> set[str]:
        first: dict[str, int] = {}
        for i, m in enumerate(spec.milestones):
            if m.id in first:
                self.problem(
                    f"duplicate milestone id {m.id!r} (first defined as milestone "
                    f"#{first[m.id] + 1})",
                    ("milestones", i, "id"),
                    m.id,
                )
            else:
                first[m.id] = i
        return set(first)

    def _known_needs(self, spec: PlaybookSpec, ids: set[str]) -> None:
        for i, m in enumerate(spec.milestones):
            for j, need in enumerate(m.needs):
                if need not in ids:
                    self.problem(
                        f"needs unknown milestone {need!r}", ("milestones", i, "needs", j), m.id
                    )
                elif need == m.id:
                    self.problem(
                        "a milestone cannot need itself", ("milestones", i, "needs", j), m.id
                    )

    def _goals(self, spec: PlaybookSpec, ids: set[str]) -> tuple[str, ...]:
        if spec.goals is None:
            needed = {n for m in spec.milestones for n in m.needs}
            return tuple(m.id for m in spec.milestones if m.id not in needed)
        if not spec.goals:
            self.problem("goals: give at least one goal, or leave goals out", ("goals",))
        for j, goal in enumerate(spec.goals):
            if goal not in ids:
                self.problem(f"goals: unknown milestone {goal!r}", ("goals", j))
        return spec.goals

    def _remember(self, spec: PlaybookSpec) -> None:
        """``remember``: unique event actions, each one as an event's ``action``
        may be (1 to 200 characters, not only spaces) (docs/playbooks.md,
        "Remembering")."""
        first: dict[str, int] = {}
        for j, name in enumerate(spec.remember or ()):
            if not name.strip() or len(name) > _ACTION_MAX:
                self.problem(
                    f"remember: {name!r} is not an event action (1 to {_ACTION_MAX} "
                    "characters, not only spaces)",
                    ("remember", j),
                )
            elif name in first:
                self.problem(
                    f"remember: {name!r} is named twice (first as #{first[name] + 1})",
                    ("remember", j),
                )
            else:
                first[name] = j

    def _depths(self, spec: PlaybookSpec) -> dict[str, int]:
        needs = {m.id: m.needs for m in spec.milestones}
        index = {m.id: i for i, m in enumerate(spec.milestones)}
        depth: dict[str, int] = {}
        state: dict[str, str] = {}
        reported: set[frozenset[str]] = set()

        def visit(node: str, trail: list[str]) -> int:
            if state.get(node) == "done":
                return depth[node]
            if state.get(node) == "active":
                cycle = [*trail[trail.index(node) :], node]
                if frozenset(cycle) not in reported:
                    reported.add(frozenset(cycle))
                    self.problem(
                        "cycle in needs: " + " → ".join(cycle),
                        ("milestones", index[node], "needs"),
                        node,
                    )
                return 0
            state[node] = "active"
            trail.append(node)
            d = 1 + max((visit(n, trail) for n in needs[node]), default=-1)
            trail.pop()
            state[node] = "done"
            depth[node] = d
            return d

        for m in spec.milestones:
            visit(m.id, [])
        return depth

    def _leads_to_goal(self, spec: PlaybookSpec, goals: tuple[str, ...]) -> None:
        needs = {m.id: m.needs for m in spec.milestones}
        useful: set[str] = set()
        stack = list(goals)
        while stack:
            node = stack.pop()
            if node not in useful:
                useful.add(node)
                stack.extend(needs[node])
        for i, m in enumerate(spec.milestones):
            if m.id not in useful:
                self.problem(
                    "leads to no goal: no goal needs it, directly or through others "
                    f"(goals: {', '.join(goals)})",
                    ("milestones", i, "id"),
                    m.id,
                )

    def _build(
        self,
        spec: PlaybookSpec,
        conditions: dict[str, Condition],
        goals: tuple[str, ...],
        depth: dict[str, int],
    ) -> Playbook:
        compiled = [
            Milestone(
                id=m.id,
                index=i,
                depth=depth[m.id],
                instructions=m.instructions,
                condition=conditions[m.id],
                needs=m.needs,
                merge=m.merge,
                integrations=m.integrations,
                due=parse_duration(m.due) if m.due is not None else None,
                atom_keys=tuple((print_atom(a), a) for a in conditions[m.id].atoms),
                flow=m.flow,
                ends=m.ends,
            )
            for i, m in enumerate(spec.milestones)
        ]
        ranked = tuple(sorted(compiled, key=lambda m: (m.depth, m.index)))
        atoms: dict[str, dict[str, Atom]] = {}
        readers: dict[str, set[str]] = {}
        for m in ranked:
            for atom in m.condition.atoms:
                atoms.setdefault(atom.fact_name, {})[print_atom(atom)] = atom
                readers.setdefault(atom.fact_name, set()).add(m.id)
        return Playbook(
            spec=spec,
            milestones=ranked,
            goals=goals,
            by_id={m.id: m for m in ranked},
            atoms_by_fact={k: tuple(v.items()) for k, v in atoms.items()},
            milestones_by_fact={k: frozenset(v) for k, v in readers.items()},
            overrides=tuple(m.id for m in ranked if m.ends == "completed_with_override"),
            remembers=frozenset(spec.remember or ()),
        )


def _days(span: timedelta) -> str:
    return f"{span.days}d" if span == timedelta(days=span.days) else str(span)


def _path(loc: tuple[Any, ...]) -> tuple[str | int, ...]:
    return tuple(p if isinstance(p, int) else str(p) for p in loc)


def _milestone_at(data: dict[str, Any], loc: tuple[Any, ...]) -> str | None:
    if len(loc) >= 2 and loc[0] == "milestones" and isinstance(loc[1], int):
        items = data.get("milestones")
        if isinstance(items, list) and loc[1] < len(items) and isinstance(items[loc[1]], dict):
            ident = items[loc[1]].get("id")
            return str(ident) if ident is not None else f"#{loc[1] + 1}"
    return None


def _condition_position(text: str, pos: Position, line: int, column: int) -> tuple[int, int]:
    """Map a position inside a condition to its position in the file."""
    if pos.style in ("|", ">"):
        # A block scalar starts on the next line, indented.
        lines = text.splitlines()
        first = pos.line  # 0-based index of the line after the indicator
        indent = 0
        for row in lines[first:]:
            if row.strip():
                indent = len(row) - len(row.lstrip())
                break
        return first + line, indent + column
    quote = 1 if pos.style in ('"', "'") else 0
    if line == 1:
        return pos.line, pos.column + quote + column - 1
    return pos.line + line - 1, column
