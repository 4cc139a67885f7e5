"""File channels and tables on the job page, in headless Chromium (the helpers of
tests/stream/gateway/browser.py; the module's gateway and worker): a question that expects a file
shows a file picker, uploads the chosen file (POST /v1/files) and answers with
its value; that answer shows in the conversation as the image itself; a reply
holding a Markdown table and one that is a list of records show as tables, with
every cell as text (a cell holding markup stays text: no element is injected),
never JSON (docs/operations.md, "The UI")."""

from __future__ import annotations

import hashlib

import pytest
from playwright.sync_api import Browser

from tests.lanes import WorkerProcess
from tests.stream.gateway.browser import FLOW_AT, FlowJob, publish, shot
from tests.stream.gateway.conftest import GatewayProcess, Lane
from tests.stream.gateway.test_files import PNG
from topics import MessageRecord

pytestmark = [pytest.mark.broker, pytest.mark.browser, pytest.mark.timeout(240)]

JOB = FlowJob("files-1")
PHOTO = f"{JOB.run}/photo/1"
INJECTED = '<img src=x id=injected onerror="document.title=1">'
MARKDOWN = f"""Here are your orders:

| order | status |
|---|---|
| A-17 | shipped |
| {INJECTED} | a \\| b |

Anything else?"""
RECORDS = '[{"sku": "W-1", "qty": 2}, {"sku": "<b>W-2</b>", "qty": 1}]'


def _said(message_id: str, text: str) -> MessageRecord:
    return MessageRecord(
        job_key=JOB.key, message_id=message_id, direction="out", channel="web",
        agent="flow:resolve", text=text, at=FLOW_AT,
    )  # fmt: skip


def test_a_file_question_uploads_the_image_shows_it_and_replies_show_as_tables(
    module_lane: Lane,
    shared_gateway: GatewayProcess,
    module_worker: WorkerProcess,
    browser: Browser,
) -> None:
    problems: list[str] = []
    page = JOB.page(shared_gateway, browser, problems)
    publish(
        module_lane, "journal",
        JOB.interrupt(PHOTO, "photo", question="Please send a photo. (send a file)",
                      expects="file", accept="image/*"),
    )  # fmt: skip
    publish(module_lane, "messages", _said("out-1", MARKDOWN), _said("out-2", RECORDS))

    # the picker: a file input taking what the channel accepts, no text box
    question = page.locator(f'#questions li[data-interrupt-id="{PHOTO}"]')
    question.wait_for(timeout=30_000)
    picker = question.locator("input.q-file")
    assert picker.get_attribute("accept") == "image/*"
    assert question.locator("input.q-text").count() == 0
    picker.set_input_files({"name": "dent.png", "mimeType": "image/png", "buffer": PNG})
    with (
        page.expect_response(lambda r: r.url.endswith("/v1/files")) as uploaded,
        page.expect_response(lambda r: r.url.endswith("/answers")) as answered,
    ):
        question.locator("button[type=submit]").click()
    assert uploaded.value.status == 201
    value = uploaded.value.json()
    assert value["id"] == hashlib.sha256(PNG).hexdigest()
    assert answered.value.status == 202, answered.value.text()
    assert answered.value.request.post_data_json == {"interrupt_id": PHOTO, "answer": value}
    question.locator(".q-status", has_text="answer dent.png accepted").wait_for(timeout=10_000)

    # the answer in the conversation: the image, fetched with the token, shown
    image = page.locator(f'#conversation .msg.in[data-interrupt-id="{PHOTO}"] img.file-image')
    image.wait_for(timeout=30_000)
    page.wait_for_function(
        "el => el.complete && el.naturalWidth === 1", arg=image.element_handle(), timeout=10_000
    )
    assert image.get_attribute("alt") == "dent.png"

    # a Markdown table: a table, the text around it kept, a cell's markup left as text
    markdown = page.locator('#conversation .msg[data-message-id="out-1"]')
    markdown.wait_for(timeout=30_000)
    table = markdown.locator("table.data-table")
    assert table.locator("th").all_inner_texts() == ["order", "status"]
    assert table.locator("tbody tr").count() == 2
    assert table.locator("tbody tr").nth(1).locator("td").all_inner_texts() == [INJECTED, "a | b"]
    assert "Here are your orders:" in markdown.inner_text()
    assert "Anything else?" in markdown.inner_text()
    assert page.locator("#injected").count() == 0
    # a list of records: a table of their keys, never JSON
    records = page.locator('#conversation .msg[data-message-id="out-2"]')
    assert records.locator("th").all_inner_texts() == ["sku", "qty"]
    assert records.locator("tbody td").all_inner_texts() == ["W-1", "2", "<b>W-2</b>", "1"]
    assert records.locator("b").count() == 0
    assert "[{" not in records.inner_text()
    assert page.title() != "1"
    shot(page, "ui-files-and-tables.png", problems)
