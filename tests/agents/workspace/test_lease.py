"""One writer per repository (docs/coding.md, "One writer per repository"),
with real processes: a second job is refused with the holder's key, a running
lease of a killed process is reclaimed, a paused one never is, and of
processes racing for one repository exactly one wins."""

from __future__ import annotations

import multiprocessing
import signal
import subprocess
import sys
from multiprocessing.synchronize import Barrier
from pathlib import Path

import pytest

from agents.workspace.lease import LeaseError, LeaseHeld, Leases, pid_alive
from tests.agents.coding.repos import make_repo

ROOT = Path(__file__).resolve().parents[3]
#: Takes the lease for job ``argv[3]``, pauses it when ``argv[4]`` says so,
#: says so, and waits to be killed.
HOLDER = """\
import sys
from pathlib import Path
from agents.workspace.lease import Leases
leases = Leases(Path(sys.argv[1]))
leases.acquire(Path(sys.argv[2]), sys.argv[3])
if sys.argv[4] == "pause":
    leases.pause(Path(sys.argv[2]), sys.argv[3])
print("held", flush=True)
sys.stdin.read()
"""


def killed_holder(data: Path, repo: Path, job: str, then: str) -> int:
    """A process that took the lease (and paused it, with ``then="pause"``),
    killed with SIGKILL and reaped: its pid, now dead."""
    with subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(data), str(repo), job, then],
        cwd=ROOT,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    ) as proc:
        assert proc.stdout is not None
        assert proc.stdout.readline() == "held\n"
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    assert not pid_alive(proc.pid)
    return proc.pid


def test_a_second_job_is_refused_with_the_holders_key(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo")
    leases = Leases(tmp_path / "data")
    first = leases.acquire(repo, "job-a")
    assert (first.job_key, first.state, first.repo) == ("job-a", "running", str(repo.resolve()))
    with pytest.raises(LeaseHeld, match="being edited by job job-a") as caught:
        leases.acquire(repo / "src", "job-b")  # the same repository, from a subfolder
    assert caught.value.holder == first
    assert leases.acquire(repo, "job-a").job_key == "job-a"  # its own: taken again
    other = make_repo(tmp_path / "other")
    assert leases.acquire(other, "job-b").job_key == "job-b"  # another repository
    assert not leases.release(repo, "job-b")  # not its lease
    assert leases.release(repo, "job-a")
    assert leases.holder(repo) is None
    assert leases.acquire(repo, "job-b").job_key == "job-b"


def test_pause_resume_and_release(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo")
    leases = Leases(tmp_path / "data")
    with pytest.raises(LeaseError, match="holds no lease"):
        leases.pause(repo, "job-a")
    leases.acquire(repo, "job-a")
    with pytest.raises(LeaseHeld):
        leases.pause(repo, "job-b")
    assert leases.pause(repo, "job-a").state == "paused"
    with pytest.raises(LeaseHeld, match="paused since"):
        leases.acquire(repo, "job-b")
    assert leases.resume(repo, "job-a").state == "running"


def test_a_running_lease_of_a_killed_process_is_reclaimed(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo")
    data = tmp_path / "data"
    dead = killed_holder(data, repo, "job-a", "run")
    leases = Leases(data)
    held = leases.holder(repo)
    assert held is not None
    assert (held.job_key, held.pid, held.state) == ("job-a", dead, "running")
    taken = leases.acquire(repo, "job-b")
    assert (taken.job_key, taken.pid) == ("job-b", leases.pid)


def test_a_paused_lease_is_never_reclaimed(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo")
    data = tmp_path / "data"
    dead = killed_holder(data, repo, "job-a", "pause")
    leases = Leases(data)
    with pytest.raises(LeaseHeld, match="job job-a") as caught:
        leases.acquire(repo, "job-b")
    assert (caught.value.holder.pid, caught.value.holder.state) == (dead, "paused")
    assert leases.resume(repo, "job-a").pid == leases.pid  # only its job takes it back


def test_a_running_lease_on_another_host_is_not_reclaimed(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo")
    Leases(tmp_path / "data", pid=999_999_999, host="elsewhere").acquire(repo, "job-a")
    with pytest.raises(LeaseHeld, match="another host, elsewhere"):
        Leases(tmp_path / "data").acquire(repo, "job-b")


def race(data: str, repo: str, job: str, start: Barrier, won: multiprocessing.Queue[str]) -> None:
    """One racer: wait for the others, try for the lease, and stay alive until
    all have tried (a winner that ended would leave a lease to reclaim)."""
    leases = Leases(Path(data))
    start.wait()
    try:
        leases.acquire(Path(repo), job)
        won.put(job)
    except LeaseHeld:
        pass
    start.wait()


def test_of_processes_racing_for_one_repository_exactly_one_wins(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo")
    context = multiprocessing.get_context("fork")
    start = context.Barrier(4)
    won: multiprocessing.Queue[str] = context.Queue()
    racers = [
        context.Process(
            target=race, args=(str(tmp_path / "data"), str(repo), f"job-{n}", start, won)
        )
        for n in range(4)
    ]
    for racer in racers:
        racer.start()
    for racer in racers:
        racer.join(30)
        assert racer.exitcode == 0
    winners = []
    while not won.empty():
        winners.append(won.get(timeout=5))
    assert len(winners) == 1
    held = Leases(tmp_path / "data").holder(repo)
    assert held is not None
    assert held.job_key == winners[0]
