"""The gateway's read model and its views, without Kafka: the records a real
engine wrote (``stream.engine.engine.Engine`` over a dict table) applied to a
``ReadModel`` as its consumer would, then read back as the API answers.

Rank, depth and goals come from the compiled playbook (the core's rules), so a
playbook listed out of rank order must still come back in rank order."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import orjson
import yaml

from compiler import JobGraph, JobState, compile_playbook
from stream.engine.engine import Engine, Record
from stream.engine.registry import Registry
from stream.gateway.readmodels.jobs import JOURNAL_KEPT, ReadModel
from stream.gateway.views import job_summary, job_view
from topics import (
    JobSnapshot,
    JournalFlow,
    JournalRun,
    JournalWorktree,
    PlaybookRecord,
    Topics,
    encode,
    stored_job_state,
)
from topics.build import job_snapshot

TOPICS = Topics("rm.")
T0 = datetime(2026, 1, 5, 9, 0, tzinfo=UTC)

#: Listed out of rank order: `late` first, though it needs `root`.
SPEC = yaml.safe_load(
    """\
key: ranks
version: 3
milestones:
  - id: late
    needs: [root]
    condition: l WITHIN 1d
  - id: root
    condition: r WITHIN 1d
  - id: other
    condition: o WITHIN 1d
"""
)


def model_after(
    *messages: tuple[dict[str, object], datetime], spec: dict[str, Any] = SPEC
) -> ReadModel:
    """A read model fed what the engine wrote for ``messages``, jobs on ``spec``."""
    playbook = compile_playbook(spec)
    store: dict[str, bytes] = {}
    engine = Engine(
        TOPICS,
        Registry([playbook]),
        lambda k, p: store.get(k),
        partitions=1,
        wall_ms=lambda: int((T0 + timedelta(days=30)).timestamp() * 1000),
    )
    model = ReadModel(TOPICS, {})
    record = PlaybookRecord(key=playbook.key, version=playbook.version, spec=playbook.to_json())
    model.apply(TOPICS.playbooks, playbook.key.encode(), encode(record))
    for offset, (message, at) in enumerate(messages):
        key = str(message["key"]).encode()
        stamp = int(at.timestamp() * 1000)
        inbox = Record(TOPICS.inbox, 0, offset, key, orjson.dumps(message), stamp)
        batch = engine.process([inbox])
        for output in batch.outputs:
            model.apply(output.topic, output.key, output.value)
        for k, _p, raw in batch.writes():  # the table's changelog, produced with them
            model.apply(TOPICS.jobstate, k.encode(), raw)
            store[k] = raw
        engine.committed(batch)
    return model


def test_a_job_view_ranks_milestones_by_the_compiled_playbook() -> None:
    model = model_after(
        ({"type": "job.start", "key": "j", "playbook_key": "ranks"}, T0),
        ({"type": "event", "key": "j", "action": "r"}, T0 + timedelta(hours=1)),
    )
    entry = model.entry("j")
    assert entry is not None
    view = job_view(model, entry)
    assert [(m.id, m.depth) for m in view.milestones] == [("root", 0), ("other", 0), ("late", 1)]
    assert view.goals == ["late", "other"]
    assert [(m.id, m.state) for m in view.milestones] == [
        ("root", "done"),
        ("other", "open"),
        ("late", "open"),
    ]
    assert view.frontier == ["other", "late"]
    assert [m.id for m in view.milestones if m.next_best] == ["other"]
    assert view.milestones[2].needs == ["root"]
    assert view.milestones[2].condition == "l WITHIN 1d"
    # The verdict that completed root cites the event, resolved from decisions.
    [evidence] = view.milestones[0].evidence
    assert (evidence.id, evidence.action) == ("p0@1", "r")
    assert (view.status, view.seq, view.playbook_version) == ("running", 2, 3)
    summary = job_summary(entry)
    assert (summary.status, summary.next_step) == ("running", "other")


def test_a_snapshot_of_an_unknown_playbook_shows_no_milestones_rather_than_guessing() -> None:
    model = model_after(({"type": "job.start", "key": "j", "playbook_key": "ranks"}, T0))
    model.playbooks.clear()
    entry = model.entry("j")
    assert entry is not None
    view = job_view(model, entry)
    assert (view.milestones, view.goals) == ([], [])
    assert view.frontier == ["root", "other"]


def test_the_journal_is_kept_per_job_and_a_bad_record_is_skipped() -> None:
    model = ReadModel(TOPICS, {})
    run = JournalRun(
        job_key="j-1", run_id="j-1#1", agent="conversation", at="2026-01-05T09:00:00Z",
        ended="max_turns", turns=10, tool_calls=0, tokens=900,
    )  # fmt: skip
    model.apply(TOPICS.journal, b"j-1", encode(run))
    model.apply(TOPICS.journal, b"j-1", b'{"type": "journal.run", "job_key": "j-1"}')
    assert [r["ended"] for r in model.journal["j-1"]] == ["max_turns"]
    assert model.skipped == 1


def test_a_flow_record_written_again_after_a_crash_is_kept_once() -> None:
    """docs/flows.md, "Crash safety": a resumed run writes its records again, byte
    for byte; (run_id, event, node, at) identifies one."""
    model = ReadModel(TOPICS, {})

    def flow(event: str, at: str, node: str | None = None) -> bytes:
        return encode(JournalFlow(
            job_key="j-2", run_id="j-2/resolve#1", flow="resolve", task_id="j-2/resolve",
            at=at, event=event, node=node,  # type: ignore[arg-type]
        ))  # fmt: skip

    written = [
        flow("started", "2026-01-05T09:00:00Z"),
        flow("node", "2026-01-05T09:00:01Z", "lookup"),
        flow("node", "2026-01-05T09:00:01Z", "lookup"),  # the crash window: again
        flow("node", "2026-01-05T09:00:02Z", "lookup"),  # the node again, later: a loop back
        flow("node", "2026-01-05T09:00:03Z", "answer"),
        flow("started", "2026-01-05T09:00:00Z"),
        flow("finished", "2026-01-05T09:00:04Z"),
        flow("finished", "2026-01-05T09:00:04Z"),
    ]
    for value in written:
        model.apply(TOPICS.journal, b"j-2", value)
    kept = [(r["event"], r["node"], r["at"][-3:-1]) for r in model.journal["j-2"]]
    assert kept == [
        ("started", None, "00"), ("node", "lookup", "01"), ("node", "lookup", "02"),
        ("node", "answer", "03"), ("finished", None, "04"),
    ]  # fmt: skip
    assert model.journal_totals["j-2"] == 5
    # what it remembers of them is bounded by the records it keeps
    for n in range(JOURNAL_KEPT + 50):
        model.apply(
            TOPICS.journal, b"j-2", flow("node", f"2026-01-06T{n // 60:02}:{n % 60:02}:00Z", "x")
        )
    assert len(model.flow_ids["j-2"]) == len(model.journal["j-2"]) == JOURNAL_KEPT
    model.evict("j-2")
    assert "j-2" not in model.flow_ids


def test_a_changed_worktree_refuses_answers_to_its_run_until_its_watch_says_otherwise() -> None:
    """docs/coding.md, "A changed worktree: the 409": the newest ``journal.worktree``
    of a job's live watch decides; one said after its watch ended is stale."""
    model = ReadModel(TOPICS, {})
    asked = {"run_id": "j-3/change#1", "interrupt_id": "i-1"}
    before, now = {"diff_sha256": "a" * 64}, {"diff_sha256": "b" * 64}

    def said(status: str, watch: str = "w-1", run: str = "j-3/change#1") -> None:
        record = JournalWorktree(
            job_key="j-3", run_id=run, watch=watch, at="2026-01-05T09:00:00Z",
            status=status, expected=before, found=now if status == "changed" else None,  # type: ignore[arg-type]
        )  # fmt: skip
        model.apply(TOPICS.journal, b"j-3", encode(record))

    said("same")
    assert model.interrupts.worktree_changed("j-3", asked) is None
    said("changed")
    refusing = model.interrupts.worktree_changed("j-3", asked)
    assert refusing is not None
    assert (refusing["expected"], refusing["found"]) == (before, now)
    assert model.interrupts.worktree_changed("j-3", {**asked, "run_id": "other"}) is None
    said("same")  # the files put back
    assert model.interrupts.worktree_changed("j-3", asked) is None
    said("changed")
    said("ended")  # an answer was taken
    assert model.interrupts.worktree_changed("j-3", asked) is None
    said("changed")  # the watcher's word from before the end, arriving after it: stale
    assert model.interrupts.worktree_changed("j-3", asked) is None
    said("changed", watch="w-2")  # the next checkpoint's watch
    assert model.interrupts.worktree_changed("j-3", asked) is not None
    assert [r["type"] for r in model.journal["j-3"]][-1] == "journal.worktree"


# -- job views from the job table's changelog (docs/kafka.md, "The job table's changelog") --


def _engine_rows(*messages: tuple[dict[str, object], datetime]) -> list[tuple[str, bytes | None]]:
    """The table rows (key, value) a real engine wrote for ``messages`` on SPEC."""
    store: dict[str, bytes] = {}
    engine = Engine(
        TOPICS,
        Registry([compile_playbook(SPEC)]),
        lambda k, p: store.get(k),
        partitions=1,
        wall_ms=lambda: int((T0 + timedelta(days=30)).timestamp() * 1000),
    )
    rows: list[tuple[str, bytes | None]] = []
    for offset, (message, at) in enumerate(messages):
        key = str(message["key"]).encode()
        inbox = Record(
            TOPICS.inbox, 0, offset, key, orjson.dumps(message), int(at.timestamp() * 1000)
        )
        batch = engine.process([inbox])
        for k, _p, raw in batch.writes():
            rows.append((k, raw))
            if raw is not None:
                store[k] = raw
        engine.committed(batch)
    return rows


def _registered(model: ReadModel) -> None:
    playbook = compile_playbook(SPEC)
    record = PlaybookRecord(key=playbook.key, version=playbook.version, spec=playbook.to_json())
    model.apply(TOPICS.playbooks, playbook.key.encode(), encode(record))


def test_a_job_s_view_is_what_its_stored_state_and_playbook_say() -> None:
    rows = _engine_rows(
        ({"type": "job.start", "key": "j", "playbook_key": "ranks"}, T0),
        ({"type": "event", "key": "j", "action": "r"}, T0 + timedelta(hours=1)),
    )
    model = ReadModel(TOPICS, {})
    _registered(model)
    for key, raw in rows:
        model.apply(TOPICS.jobstate, key.encode(), raw)
    # The workers' own rows (due-time index, watermarks: keys starting with NUL)
    # are read past: one job, nothing else.
    assert sorted(model.jobs) == ["j"]
    assert any(key.startswith("\x00") for key, _raw in rows)
    entry = model.entry("j")
    assert entry is not None
    assert entry.snapshot is not None
    # The view the worker wrote to the `jobs` topic before issue 35, byte for byte.
    state = JobState.from_bytes(stored_job_state(b"j", rows_of(rows, "j")[-1]) or b"")
    graph = JobGraph(compile_playbook(SPEC))
    assert encode(entry.snapshot) == encode(
        JobSnapshot.model_validate(job_snapshot(state.json(), graph.frontier(state)))
    )
    assert (entry.snapshot.seq, entry.snapshot.frontier) == (2, ["other", "late"])
    assert entry.snapshot.milestones == {"late": "open", "root": "done", "other": "open"}


def rows_of(rows: list[tuple[str, bytes | None]], key: str) -> list[bytes]:
    return [raw for k, raw in rows if k == key and raw is not None]


def test_a_state_read_before_its_playbook_is_shown_once_the_playbook_is_read() -> None:
    rows = _engine_rows(({"type": "job.start", "key": "j", "playbook_key": "ranks"}, T0))
    model = ReadModel(TOPICS, {})
    for key, raw in rows:
        model.apply(TOPICS.jobstate, key.encode(), raw)
    assert model.entry("j") is None  # its frontier needs the playbook
    _registered(model)
    entry = model.entry("j")
    assert entry is not None
    assert entry.snapshot is not None
    assert (entry.snapshot.status, entry.snapshot.frontier) == ("running", ["root", "other"])


def test_an_older_state_read_again_does_not_replace_a_newer_one() -> None:
    rows = _engine_rows(
        ({"type": "job.start", "key": "j", "playbook_key": "ranks"}, T0),
        ({"type": "event", "key": "j", "action": "r"}, T0 + timedelta(hours=1)),
    )
    model = ReadModel(TOPICS, {})
    _registered(model)
    first, second = rows_of(rows, "j")
    model.apply(TOPICS.jobstate, b"j", second)
    model.apply(TOPICS.jobstate, b"j", first)
    entry = model.entry("j")
    assert entry is not None
    assert entry.snapshot is not None
    assert entry.snapshot.seq == 2


# -- the job's event stream (docs/api.md, "Live") ------------------------------------------


def test_the_event_stream_sends_a_job_view_only_when_it_changed() -> None:
    """A journal record or a message wakes the stream and leaves the job's view
    as it was: the view is not sent again; a new state is."""
    from types import SimpleNamespace

    from stream.gateway.routes.streams import _follow

    rows = _engine_rows(
        ({"type": "job.start", "key": "j", "playbook_key": "ranks"}, T0),
        ({"type": "event", "key": "j", "action": "r"}, T0 + timedelta(hours=1)),
    )
    first, second = rows_of(rows, "j")
    model = ReadModel(TOPICS, {})
    _registered(model)
    model.apply(TOPICS.jobstate, b"j", first)
    run = JournalRun(
        job_key="j", run_id="j#1", agent="conversation", at="2026-01-05T09:00:00Z",
        ended="done", turns=1, tool_calls=0, tokens=10,
    )  # fmt: skip

    async def watch() -> list[tuple[str, int | None]]:
        gateway = SimpleNamespace(model=model, stopping=asyncio.Event())
        stream = _follow(gateway, "j")  # type: ignore[arg-type]
        events: list[tuple[str, int | None]] = []

        async def next_event() -> tuple[str, int | None]:
            while True:
                chunk = await anext(stream)
                if b"event: " in chunk:
                    head, data = chunk.split(b"event: ", 1)[1].split(b"\ndata: ", 1)
                    return head.decode(), orjson.loads(data).get("seq")

        async def then(apply: Callable[[], None]) -> tuple[str, int | None]:
            """The next event, asked for first: the stream runs on to what it
            sends next or to its wait for a change (one turn of the loop, no
            time passing), and only then ``apply`` reads a record."""
            asked = asyncio.ensure_future(next_event())
            await asyncio.sleep(0)
            apply()
            return await asked

        events.append(await next_event())  # the view, at once
        # A journal record wakes the stream and leaves the view as it was...
        events.append(await then(lambda: model.apply(TOPICS.journal, b"j", encode(run))))
        # ... and a new state is a new view.
        events.append(await then(lambda: model.apply(TOPICS.jobstate, b"j", second)))
        while events[-1] != ("job", 2):
            events.append(await next_event())
        gateway.stopping.set()
        model.wake_all()
        await stream.aclose()
        return events

    assert asyncio.run(asyncio.wait_for(watch(), 10)) == [
        ("job", 1), ("journal", None), ("job", 2),
    ]  # fmt: skip


def test_a_row_written_again_with_the_same_seq_changes_nothing_held() -> None:
    """A refusal, or a batch decided again, writes the job's row again with the
    state as it was: watchers are not woken, nothing is counted twice."""
    rows = _engine_rows(({"type": "job.start", "key": "j", "playbook_key": "ranks"}, T0))
    [first] = rows_of(rows, "j")
    model = ReadModel(TOPICS, {})
    _registered(model)
    model.apply(TOPICS.jobstate, b"j", first)
    flag = model.watch("j")
    held = dict(model._held["j"])
    model.apply(TOPICS.jobstate, b"j", first)
    assert not flag.is_set()
    assert model._held["j"] == held


def test_a_job_view_is_counted_as_what_it_weighs_not_as_its_state() -> None:
    """The state keeps the job's recent idempotency keys and its tallies, which
    grow with its events; the view held has neither (docs/operations.md, "The
    gateway's memory": counted as JSON)."""
    keyed = [
        ({"type": "event", "key": "j", "action": "o", "idempotency_key": f"{n:03d}" + "k" * 190},
         T0 + timedelta(minutes=n + 1))
        for n in range(40)
    ]  # fmt: skip
    rows = _engine_rows(({"type": "job.start", "key": "j", "playbook_key": "ranks"}, T0), *keyed)
    last = rows_of(rows, "j")[-1]
    model = ReadModel(TOPICS, {})
    _registered(model)
    model.apply(TOPICS.jobstate, b"j", last)
    state = stored_job_state(b"j", last)
    assert state is not None
    assert len(state) > 8_000  # 40 keys of 193 characters
    assert 300 < model._held["j"]["snapshot"] < 2_000


def test_an_evicted_job_gets_its_view_back_from_a_row_with_the_seq_its_summary_has() -> None:
    rows = _engine_rows(
        ({"type": "job.start", "key": "j", "playbook_key": "ranks"}, T0),
        ({"type": "job.start", "key": "k", "playbook_key": "ranks"}, T0),
        ({"type": "job.start", "key": "l", "playbook_key": "ranks"}, T0),
    )
    model = ReadModel(TOPICS, {}, jobs_kept=1)
    _registered(model)
    for key in ("j", "k", "l"):
        model.apply(TOPICS.jobstate, key.encode(), rows_of(rows, key)[-1])
    assert "j" in model.gone  # evicted: its summary only
    model.apply(TOPICS.jobstate, b"j", rows_of(rows, "j")[-1])  # the same seq
    entry = model.jobs["j"]
    assert entry.in_memory
    assert entry.snapshot is not None
    assert entry.snapshot.timers  # the full view again, not the summary


def test_a_playbook_version_read_on_the_topic_replaces_what_was_compiled_before() -> None:
    """The gateway may compile a version from its own folder before the
    workers' record of it is read; the record is what the jobs ran."""
    model = ReadModel(TOPICS, {"ranks": {3: {**SPEC, "milestones": SPEC["milestones"][1:2]}}})
    before = model.compiled("ranks", 3)
    assert before is not None
    assert [m.id for m in before.milestones] == ["root"]
    _registered(model)
    after = model.compiled("ranks", 3)
    assert after is not None
    assert sorted(m.id for m in after.milestones) == ["late", "other", "root"]
