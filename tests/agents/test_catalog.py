"""The agent catalog: the bundled one is valid and covers the bundled
playbooks; every problem is named with file, line and column."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from agents.catalog import CatalogError, check_playbooks, load_catalog, load_catalog_file
from stream.runtime.files import load_playbooks_dir, playbook_files
from tests.inprocess import invoke

ROOT = Path(__file__).resolve().parents[2]

GOOD = """\
integrations:
  calendar: {tools: [schedule_meeting]}
  crm: {delegate: crm_agent}
agents:
  conversation: {instructions: "You help the customer through onboarding."}
  crm_agent: {instructions: "You keep the CRM up to date.", tools: [update_crm]}
tools:
  schedule_meeting:
    description: Book a meeting at a given time.
    parameters: {type: object, properties: {when: {type: string}}, required: [when]}
    http: {url: "${CALENDAR_URL}/book", method: POST}
    idempotent: true
    records: {fact: meeting_scheduled, properties: {when: "$.when"}}
  update_crm:
    description: Update the CRM.
    http: {url: "http://crm/update"}
"""


def test_the_bundled_catalog_is_valid_and_covers_the_bundled_playbooks() -> None:
    catalog = load_catalog_file(ROOT / "examples" / "catalog.yaml")
    assert "conversation" in catalog.agents
    assert catalog.skills["tone"].startswith("Write as a helpful colleague")
    found = load_playbooks_dir(ROOT / "examples")
    assert not found.problems
    assert check_playbooks(catalog, found.by_key.values()) == []


def test_the_catalog_is_not_read_as_a_playbook() -> None:
    assert ROOT / "examples" / "catalog.yaml" not in playbook_files(ROOT / "examples")


def test_the_pinned_shape_loads_and_grants_what_it_says() -> None:
    catalog = load_catalog(GOOD, "c.yaml")
    assert catalog.grants(["calendar", "crm", "calendar", "unknown"]) == (
        ("schedule_meeting",),
        ("crm_agent",),
    )
    tool = catalog.tools["schedule_meeting"]
    assert tool.idempotent
    assert tool.records is not None
    assert tool.records.properties == {"when": "$.when"}


@pytest.mark.parametrize(
    ("change", "line", "column", "words"),
    [
        (("calendar: {tools: [schedule_meeting]}", "calendar: {tools: [book]}"), 2, 22,
         "integrations.calendar: unknown tool 'book'"),
        (("crm: {delegate: crm_agent}", "crm: {delegate: crm_bot}"), 3, 19,
         "integrations.crm: unknown agent 'crm_bot'"),
        (("  conversation:", "  talker:"), 5, 3, "the 'conversation' agent is required"),
        (("idempotent: true", "idempotent: true\n    colour: red"), 13, 13,
         "tools.schedule_meeting.colour: unknown field 'colour'"),
        (("{type: object, properties: {when: {type: string}}, required: [when]}",
          "{type: object, required: when}"), 10, 17, "tools.schedule_meeting.parameters:"),
        (("$.when", "when"), 13, 59, "'when' is not a response path"),
        (('    http: {url: "http://crm/update"}\n', ""), 15, 5,
         "tools.update_crm: says nothing for trusted code to do"),
    ],
)  # fmt: skip
def test_a_problem_is_named_with_file_line_and_column(
    change: tuple[str, str], line: int, column: int, words: str
) -> None:
    text = GOOD.replace(*change)
    assert text != GOOD
    with pytest.raises(CatalogError) as caught:
        load_catalog(text, "c.yaml")
    problems = caught.value.problems
    assert any(p.startswith(f"c.yaml:{line}:{column}: ") and words in p for p in problems), problems


def test_check_names_an_integration_the_catalog_lacks(tmp_path: Path) -> None:
    (tmp_path / "catalog.yaml").write_text(GOOD)
    playbook = (ROOT / "examples" / "onboarding.yaml").read_text()
    (tmp_path / "onboarding.yaml").write_text(playbook)
    done = invoke(["check", str(tmp_path)], env=os.environ, cwd=Path.cwd())
    assert done.returncode == 1
    assert (
        f"{tmp_path / 'catalog.yaml'}: playbook onboarding milestone collectIdentity: "
        "integration 'email' is not in the catalog"
    ) in done.stdout
    (tmp_path / "catalog.yaml").write_text(
        GOOD.replace("integrations:\n", "integrations:\n  email: {}\n  setup: {}\n")
    )
    done = invoke(["check", str(tmp_path)], env=os.environ, cwd=Path.cwd())
    assert done.returncode == 0, done.stdout
    assert "ok: 2 file(s) valid" in done.stdout


def with_success(rule: str) -> str:
    """GOOD with ``rule`` as schedule_meeting's ``success:`` (line 14)."""
    records = 'records: {fact: meeting_scheduled, properties: {when: "$.when"}}\n'
    return GOOD.replace(records, f"{records}    success: {rule}\n")


@pytest.mark.parametrize(
    ("rule", "path", "value"),
    [
        ('{path: "$.status", equals: confirmed}', "$.status", "confirmed"),
        ('{path: "$.status", in: [confirmed, booked]}', "$.status", ("confirmed", "booked")),
        ('{path: "$.booking.id", exists: true}', "$.booking.id", True),
        ('{path: "$.errors", exists: false}', "$.errors", False),
        ('{path: "$.left", equals: null}', "$.left", None),
    ],
)
def test_a_success_rule_loads(rule: str, path: str, value: Any) -> None:
    success = load_catalog(with_success(rule), "c.yaml").tools["schedule_meeting"].success
    assert success is not None
    assert success.path == path
    assert value in (success.equals, success.in_, success.exists)


@pytest.mark.parametrize(
    ("rule", "column", "words"),
    [
        ('{path: "$.status"}', 14,
         "tools.schedule_meeting.success: says exactly one of equals, in and exists"),
        ('{path: "$.status", equals: confirmed, exists: true}', 14,
         "says exactly one of equals, in and exists (it says equals, exists)"),
        ('{path: "$.status", in: []}', 37, "tools.schedule_meeting.success.in: "),
        ('{path: "$.status", in: confirmed}', 37, "tools.schedule_meeting.success.in: "),
        ('{path: "$.status", in: [a, [b]]}', 37,
         "success.in: must be a string, number, true, false or null"),
        ('{path: "$.status", equals: {a: 1}}', 41,
         "success.equals: must be a string, number, true, false or null"),
        ('{path: "$.status", exists: null}', 14, "success: exists cannot be null"),
        ('{path: "$.status", exists: maybe}', 41, "success.exists: "),
        ('{path: status, equals: confirmed}', 21,
         "tools.schedule_meeting.success.path: 'status' is not a response path"),
        ('{equals: confirmed}', 14, "tools.schedule_meeting.success.path: this field is required"),
        ('{path: "$.s", equal: confirmed}', 35, "success.equal: unknown field 'equal'"),
        ('{path: "$.s", in_: [confirmed]}', 33, "success.in_: unknown field 'in_'"),
        ("confirmed", 14, "tools.schedule_meeting.success: "),
    ],
)  # fmt: skip
def test_a_bad_success_rule_is_named_with_file_line_and_column(
    rule: str, column: int, words: str
) -> None:
    with pytest.raises(CatalogError) as caught:
        load_catalog(with_success(rule), "c.yaml")
    problems = caught.value.problems
    assert any(p.startswith(f"c.yaml:14:{column}: ") and words in p for p in problems), problems
