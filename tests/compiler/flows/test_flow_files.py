"""File channels in the step function (docs/flows.md, "File channels"): an ask
whose output is a file channel asks for a file, takes only a file value of a
type its ``accept`` allows (anything else leaves it open), and an llm node
naming the channel is given the file value beside its prompt."""

from __future__ import annotations

from typing import Any

import pytest

from compiler import Answer, Ask, CallModel, accepts, file_value_problem, load_flow
from tests.compiler.flows.test_flow_step import Driver

FLOW = """\
version: "1"
outputs: [description]
state:
  photo: {type: file, accept: "image/*"}
  description: {type: string}
start: ask_photo
nodes:
  - {id: ask_photo, type: ask, ask: Send a photo., output: photo}
  - {id: describe, type: llm, prompt: "Describe {{photo}} ({{photo.name}})", output: description}
edges:
  - {from: ask_photo, to: describe}
  - {from: describe, to: END}
"""
ID = "ab" * 32
PHOTO = {"id": ID, "name": "cat.png", "mediaType": "image/png", "url": f"/v1/files/{ID}",
         "bytes": 70}  # fmt: skip


def test_an_ask_into_a_file_channel_takes_only_a_file_value_it_accepts() -> None:
    run = Driver(load_flow(FLOW, "photo.yaml"))
    assert run.actions == [
        Ask(interrupt_id="r/ask_photo/1", node="ask_photo", question="Send a photo.",
            expects="file", accept="image/*")
    ]  # fmt: skip
    waiting = run.state
    for wrong in ("a photo", {**PHOTO, "mediaType": "application/pdf"}, {**PHOTO, "id": "x"}):
        assert run(Answer(interrupt_id="r/ask_photo/1", answer=wrong)) == []
        assert run.state == waiting
    [call] = run(Answer(interrupt_id="r/ask_photo/1", answer=PHOTO))
    assert isinstance(call, CallModel)
    assert call.files == (PHOTO,)
    assert call.prompt.endswith("(cat.png)")


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        (PHOTO, None),
        ("text", "a file channel holds a file value {id, name, mediaType, url, bytes}"),
        ({**PHOTO, "bytes": True}, "a file value needs 'bytes' (int)"),
        ({**PHOTO, "url": "https://elsewhere/x"}, "a file value's url is /v1/files/{id}"),
    ],
)
def test_a_file_value_is_checked_by_its_shape(value: Any, problem: str | None) -> None:
    assert file_value_problem(value) == problem


def test_accept_reads_media_type_patterns() -> None:
    assert accepts("image/*", "image/png")
    assert accepts("application/pdf, text/csv", "text/csv")
    assert accepts(None, "application/zip")
    assert not accepts("image/*", "application/pdf")
    assert file_value_problem(PHOTO, "application/pdf") == (
        "this file channel accepts application/pdf, not image/png"
    )
