"""The lines `start-job` and `send-event` print for a decision (stream/cli/outcome.py
`describe`), without a broker: a refusal names the job like the other lines do."""

from __future__ import annotations

from stream.cli.outcome import Sent, describe

WHERE = "events partition 0 offset 7"


def refused(reason: str, key: str = "job-9") -> list[str]:
    sent = Sent("events", 0, 7, "refused", {"refused": reason})
    return describe(sent, {"type": "event", "key": key, "action": "a"}, 5.0)


def test_a_refusal_for_an_unknown_job_names_the_job() -> None:
    assert refused("unknown job: no job.start was applied") == [
        f"refused: unknown job 'job-9': no job.start was applied ({WHERE})"
    ]


def test_other_refusals_are_printed_as_the_worker_gave_them() -> None:
    assert refused("job 'job-9' already exists") == [
        f"refused: job 'job-9' already exists ({WHERE})"
    ]
