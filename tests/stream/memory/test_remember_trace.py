"""``lemongraph simulate --trace`` shows a remembered fact (docs/playbooks.md,
"Remembering"): a scenario proves what a playbook remembers before it runs."""

from __future__ import annotations

from pathlib import Path

from tests.stream.cli.test_cli_simulate_check import run

PLAYBOOK = """\
key: plans
version: 1
remember: [plan_chosen]
milestones:
  - id: activate
    condition: account_activated WITHIN 14d
"""
SCENARIO = """\
playbook: plans.yaml
scenarios:
  - name: remembers
    base: 2026-03-02T09:00:00Z
    subject: {id: acct-1}
    events:
      - {at: 1h, action: plan_chosen, value: pro}
      - {at: 90m, action: plan_chosen, value: enterprise, source: agent}
      - {at: 2h, action: account_activated, source: tool}
    expect:
      status: done
"""


def test_the_trace_shows_the_fact_a_world_event_made_and_none_for_a_claim(tmp_path: Path) -> None:
    (tmp_path / "plans.yaml").write_text(PLAYBOOK)
    (tmp_path / "plans.scenario.yaml").write_text(SCENARIO)
    result = run("simulate", "--dir", str(tmp_path), "--trace")
    assert result.returncode == 0, result.stdout + result.stderr
    remembered = [line.strip() for line in result.stdout.splitlines() if "fact.remembered" in line]
    assert remembered == ["↳ fact.remembered plan_chosen='pro' of acct-1 (source world, id e1)"]
