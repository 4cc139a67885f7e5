"""`lemongraph start-job` and `send-event` say what the worker decided, against a
real worker on the real broker: applied (0), duplicate (0), refused (1), no
decision in time (3), --no-wait, and a warning for an action no condition reads."""

from __future__ import annotations

import subprocess
import uuid

from stream.engine.worker import prepare
from stream.runtime.config import Settings
from tests.lanes import LEMONGRAPH, Lane


def test_the_cli_says_what_the_worker_decided(lane: Lane) -> None:
    lane.start_worker()

    started = lane.cli("start-job", "job-1", "onboarding", check=False)
    assert started.returncode == 0, started.stdout + started.stderr
    first = started.stdout.splitlines()[0]
    assert first.startswith("applied: job 'job-1' started on onboarding v1"), started.stdout
    assert "collectIdentity" in started.stdout  # the milestone that opened

    again = lane.cli("start-job", "job-1", "onboarding", check=False)
    assert again.returncode == 1, again.stdout + again.stderr
    assert again.stdout.startswith("refused: job 'job-1' already exists"), again.stdout

    unknown = lane.cli("start-job", "job-2", "onbording", check=False)
    assert unknown.returncode == 1
    assert unknown.stdout.startswith("refused: unknown playbook 'onbording'"), unknown.stdout

    no_job = lane.cli("send-event", "job-9", "id_uploaded", check=False)
    assert no_job.returncode == 1
    assert no_job.stdout.startswith("refused: unknown job 'job-9': no job.start"), no_job.stdout

    moved = lane.cli("send-event", "job-1", "id_uploaded", "--idempotency-key", "e1", check=False)
    assert moved.returncode == 0, moved.stdout + moved.stderr
    assert moved.stdout.startswith("applied: job 'job-1' took 'id_uploaded' on onboarding v1")
    assert "collectIdentity: open -> done" in moved.stdout, moved.stdout
    assert "warning" not in moved.stderr

    retried = lane.cli("send-event", "job-1", "id_uploaded", "--idempotency-key", "e1", check=False)
    assert retried.returncode == 0, retried.stdout + retried.stderr
    assert retried.stdout.startswith("duplicate: job 'job-1' already applied an event with "), (
        retried.stdout
    )

    typo = lane.cli("send-event", "job-1", "meeting_sheduled", check=False)
    assert typo.returncode == 0, typo.stdout + typo.stderr
    assert typo.stdout.startswith("applied: ")
    assert "no milestone moved" in typo.stdout
    assert "warning: no condition of onboarding v1 reads 'meeting_sheduled'" in typo.stderr
    assert "did you mean 'meeting_scheduled'?" in typo.stderr

    quick = lane.cli("send-event", "job-1", "self_service_completed", "--no-wait", check=False)
    assert quick.returncode == 0, quick.stdout + quick.stderr
    assert quick.stdout.startswith(f"sent to {lane.topics.inbox} partition "), quick.stdout
    assert "not waiting" in quick.stdout
    assert "warning" not in quick.stderr  # a playbook under the folder reads it

    unread = lane.cli("send-event", "job-1", "nobody_reads_this", "--no-wait", check=False)
    assert unread.returncode == 0
    assert "warning: no condition of any playbook under" in unread.stderr, unread.stderr

    # replay --with-playbook with a playbook no job runs says so (it printed nothing).
    other = lane.root / "other.yaml"
    other.write_text(
        "key: unused\nversion: 1\nmilestones:\n  - id: a\n    condition: x\n", encoding="utf-8"
    )
    replayed = lane.cli("replay", "--with-playbook", str(other), check=False)
    assert replayed.returncode == 1, replayed.stdout + replayed.stderr
    assert "no job in the decision log runs playbook 'unused'" in replayed.stderr
    assert "onboarding (1 job)" in replayed.stderr
    one = lane.cli("replay", "--with-playbook", str(other), "--job", "job-1", check=False)
    assert one.returncode == 1
    assert "job 'job-1' runs onboarding, not 'unused'" in one.stderr, one.stderr


def test_no_worker_means_no_decision_in_time_exit_3(lane: Lane) -> None:
    # The topics exist and the playbooks are registered (what a worker's start does
    # before it joins its group: stream.engine.worker.prepare), but no worker runs.
    prepare(Settings.from_env(lane.env()), say=lambda _line: None)
    done = lane.cli("start-job", "job-1", "onboarding", "--timeout", "1.5", check=False)
    assert done.returncode == 3, done.stdout + done.stderr
    assert done.stdout.startswith("no decision within 1.5 s: sent to "), done.stdout
    # --no-wait keeps the old behaviour: sent is all it knows.
    quick = lane.cli("start-job", "job-2", "onboarding", "--no-wait", check=False)
    assert quick.returncode == 0
    assert quick.stdout.startswith("sent to "), quick.stdout


def test_no_topics_yet_means_no_decision_in_time_exit_3(lane: Lane) -> None:
    # No worker ever ran under this prefix: there is no decisions topic to read.
    env = lane.env(LEMONGRAPH_TOPIC_PREFIX=f"fresh{uuid.uuid4().hex[:8]}.")
    # the console script as its own process: start-job's real-process test (the
    # module's other commands run in the test's process, Lane.cli)
    done = subprocess.run(
        [str(LEMONGRAPH), "start-job", "job-1", "onboarding", "--timeout", "1"],
        cwd=lane.root,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 3, done.stdout + done.stderr
    assert done.stdout.startswith("no decision within 1 s: sent to "), done.stdout
