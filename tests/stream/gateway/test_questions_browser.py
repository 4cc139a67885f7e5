"""An approval's shown channels on the job page, in headless Chromium (the
helpers of tests/stream/gateway/browser.py): labelled and readable as the agents service wrote
them (``shown``: docs/flows.md, "What a person reads"), nested values as
indented lines and lists as bullets; a record written without ``shown`` gets
its ``show`` values as lines too; the journal's rows say a flow's values in
words. Never JSON."""

from __future__ import annotations

import pytest
from playwright.sync_api import Browser

from compiler import shown_fields
from tests.lanes import WorkerProcess
from tests.stream.gateway.browser import FLOW_AT, FlowJob, publish, shot
from tests.stream.gateway.conftest import GatewayProcess, Lane
from topics import JournalFlow, JournalWorktree

pytestmark = [pytest.mark.broker, pytest.mark.browser, pytest.mark.timeout(240)]

JOB = FlowJob("shown-1")
TREE = FlowJob("tree-1")
APPROVAL, OLDER = JOB.approval, f"{JOB.run}/confirm/2"
ORDER = {
    "id": "A-17",
    "status": "shipped",
    "customer": {"name": "Ada", "city": "Ghent"},
    "items": [{"sku": "W-1", "qty": 2}, "gift wrap"],
    "paid": False,
}


def test_an_approvals_nested_values_read_as_labelled_lines_never_json(
    module_lane: Lane,
    shared_gateway: GatewayProcess,
    module_worker: WorkerProcess,
    browser: Browser,
) -> None:
    problems: list[str] = []
    page = JOB.page(shared_gateway, browser, problems)
    show = {"order_id": "A-17", "order": ORDER}
    shown = shown_fields(show, {"order": "The order as the shop returns it."})
    publish(
        module_lane, "journal",
        JOB.interrupt(APPROVAL, "confirm", kind="approval",
                      question="Refund A-17? (answer yes or no)", show=show, shown=shown),
        # as an older service wrote it: the values only
        JOB.interrupt(OLDER, "confirm", kind="approval", question="Refund A-18?",
                      show={"order": ORDER}),
        JournalFlow(job_key=JOB.key, run_id=JOB.run, flow="resolve",
                    task_id=f"{JOB.key}/resolve", at=FLOW_AT, event="finished",
                    outputs={"refund": ORDER}),
    )  # fmt: skip
    approval = page.locator(f'#questions li[data-interrupt-id="{APPROVAL}"]')
    approval.wait_for(timeout=30_000)
    assert approval.locator(".q-show dt").all_inner_texts() == [
        "Order ID",
        "The order as the shop returns it",
    ]
    # as the service wrote them (tests/compiler/flows/test_readable.py pins the text)
    assert approval.locator(".q-show dd").all_inner_texts() == [f.text for f in shown]
    assert shown[1].text.splitlines()[2:5] == ["Customer:", "  Name: Ada", "  City: Ghent"]
    older = page.locator(f'#questions li[data-interrupt-id="{OLDER}"]')
    older.wait_for(timeout=30_000)
    assert older.locator(".q-show dt").all_inner_texts() == ["order"]
    [text] = older.locator(".q-show dd").all_inner_texts()
    assert text.splitlines()[:4] == ["id: A-17", "status: shipped", "customer:", "  name: Ada"]
    assert "  - gift wrap" in text.splitlines()
    # the journal's rows say the values in words too
    finished = page.locator('#journal tr[data-kind="journal.flow"][data-outcome="finished"]')
    finished.wait_for(timeout=30_000)
    assert "outputs refund: id: A-17, status: shipped, customer: (name: Ada, city: Ghent)" in (
        finished.inner_text()
    )
    rows = page.locator('#journal tr[data-kind="journal.interrupt"]')
    assert rows.count() == 2
    journal = [rows.nth(i).inner_text() for i in range(2)] + [finished.inner_text()]
    for shown_text in (approval.locator(".q-show").inner_text(), text, *journal):
        assert not set(shown_text) & set('{}[]"'), shown_text
    shot(page, "ui-approval-fields.png", problems)


def test_a_changed_worktree_refuses_the_answer_and_leaves_the_question_open(
    module_lane: Lane,
    shared_gateway: GatewayProcess,
    module_worker: WorkerProcess,
    browser: Browser,
) -> None:
    """docs/coding.md, "A changed worktree: the 409": the page says the 409 and
    keeps the question answerable; once the watch says the files are back, the
    same button's answer is taken."""
    problems: list[str] = []
    page = TREE.page(shared_gateway, browser, problems)
    asked = f"{TREE.run}/checkpoint/1"
    before, now = {"diff_sha256": "a" * 64}, {"diff_sha256": "b" * 64}

    def watch(status: str) -> JournalWorktree:
        return JournalWorktree(
            job_key=TREE.key, run_id=TREE.run, watch="w-1", at=FLOW_AT, status=status,  # type: ignore[arg-type]
            expected=before, found=now if status == "changed" else None,
            why="the worktree changed since the checkpoint (tracked files)",
        )  # fmt: skip

    publish(
        module_lane, "journal", watch("same"),
        TREE.interrupt(asked, "checkpoint", question="What now?", answers=["revise", "abort"]),
        watch("changed"),
    )  # fmt: skip
    question = page.locator(f'#questions li[data-interrupt-id="{asked}"]')
    question.wait_for(timeout=30_000)
    page.locator('#journal tr[data-kind="journal.worktree"][data-outcome="changed"]').wait_for(
        timeout=30_000
    )
    with page.expect_response(lambda r: r.url.endswith("/answers")) as refused:
        question.locator("button", has_text="abort").click()
    assert refused.value.status == 409
    question.locator(".q-status", has_text="409 worktree_changed").wait_for(timeout=10_000)
    assert question.get_attribute("data-state") == "error"  # not closed: still answerable
    assert question.locator("button:disabled").count() == 0

    publish(module_lane, "journal", watch("same"))  # the files put back
    page.locator('#journal tr[data-kind="journal.worktree"][data-outcome="same"]').nth(1).wait_for(
        timeout=30_000
    )
    with page.expect_response(lambda r: r.url.endswith("/answers")) as taken:
        question.locator("button", has_text="abort").click()
    assert taken.value.status == 202
    page.wait_for_selector(f'#questions li[data-interrupt-id="{asked}"][data-state="sent"]')
    assert not problems, problems
