"""A model given a file (docs/flows.md, "A model reads a file"): an image in the
file store goes to the model as an image (the Responses API's ``input_image``,
chat completions' ``image_url``, a ``data:`` URL) through the real ``openai``
client to the stand-in, which reads it as ``[image TYPE, N bytes]``; any other
file, or an image not in this process's store, is named in the text."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from agents.compose import ModelRequest
from agents.dev.standin import StandinScript, build_standin
from agents.flows.executor import flow_instructions, model_input
from agents.model import Model, ModelSettings
from stream.runtime.filestore import DEFAULT_FILE_TYPES, FileStore
from tests.stream.gateway.test_files import PNG

SEEN = f"[image image/png, {len(PNG)} bytes]"
SCRIPT = StandinScript.model_validate(
    {
        "rules": [
            {"when": {"flow": "photo", "prompt_contains": SEEN}, "say": "I see the photo."},
            {"when": {"flow": "photo"}, "say": "No image."},
        ]
    }
)


@pytest.fixture(params=["responses", "chat"])
def settings(request: pytest.FixtureRequest, serve: Callable[[Any], str]) -> ModelSettings:
    base = serve(build_standin(SCRIPT))
    return ModelSettings(api_key="sk-test", base_url=f"{base}/v1", api=request.param)


def _ask(settings: ModelSettings, prompt: str, images: tuple[str, ...]) -> str | None:
    async def go() -> str | None:
        model = Model(settings)
        try:
            request = ModelRequest(
                agent="flow",
                instructions=flow_instructions("photo", "describe", None),
                messages=(("user", prompt),),
                images=images,
            )
            return (await model.call(request)).text
        finally:
            await model.close()

    return asyncio.run(go())


def test_an_image_reaches_the_model_as_an_image_and_a_document_by_its_name(
    settings: ModelSettings, tmp_path: Path
) -> None:
    store = FileStore(tmp_path / "files", 1 << 20, DEFAULT_FILE_TYPES)
    photo = store.put("dent.png", "image/png", PNG).value()
    sheet = store.put("rows.csv", "text/csv", b"a,b\n1,2\n").value()
    elsewhere = {**photo, "id": "c" * 64, "url": "/v1/files/" + "c" * 64, "name": "gone.png"}

    prompt, images = model_input("Describe it.", [photo, sheet, elsewhere], store)
    assert [i.split(",", 1)[0] for i in images] == ["data:image/png;base64"]
    assert prompt.splitlines()[-2:] == [
        f"- rows.csv (text/csv, 8 bytes, {sheet['url']})",
        f"- gone.png (image/png, {len(PNG)} bytes, {elsewhere['url']})",
    ]
    assert _ask(settings, prompt, images) == "I see the photo."
    assert _ask(settings, prompt, ()) == "No image."
