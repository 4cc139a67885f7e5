"""File channels' files through a real gateway (docs/api.md, "Files"): an upload
is kept once per content under the gateway's data folder, answered with its file
value, served back with its type and headers that keep a script in it from
running; the size limit, the type allow-list and the type check refuse. One
gateway per module, with a small size limit."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator

import pytest

from tests.lanes import Lane
from tests.stream.gateway.conftest import GatewayProcess, launch_gateway

pytestmark = [pytest.mark.broker, pytest.mark.timeout(120)]

#: The smallest PNG there is (a 1×1 transparent pixel).
PNG = bytes.fromhex(
    "89504e470d0a1a0a0000000d4948445200000001000000010806000000"
    "1f15c4890000000d49444154789c6360000002000001e221bc330000000049454e44ae426082"
)
LIMIT = 4096


@pytest.fixture(scope="module")
def files_gateway(module_lane: Lane) -> Iterator[GatewayProcess]:
    gateway = launch_gateway(module_lane, LEMONGRAPH_FILE_MAX_BYTES=str(LIMIT))
    yield gateway
    gateway.stop()


def test_an_upload_is_kept_once_by_its_content_and_served_back(
    files_gateway: GatewayProcess, module_lane: Lane
) -> None:
    gateway = files_gateway
    with gateway.client(gateway.token(name="person")) as client:
        first = client.post("/v1/files", files={"file": ("cat.png", PNG, "image/png")})
        again = client.post("/v1/files", files={"file": ("same.png", PNG, "image/png")})
        assert first.status_code == 201, first.text
        digest = hashlib.sha256(PNG).hexdigest()
        assert first.json() == {
            "id": digest,
            "name": "cat.png",
            "mediaType": "image/png",
            "url": f"/v1/files/{digest}",
            "bytes": len(PNG),
        }
        assert again.status_code == 201, again.text
        assert again.json()["id"] == digest
        assert again.json()["name"] == "same.png"
        stored = sorted(p.name for p in (module_lane.root / "data" / "files").iterdir())
        assert stored == [digest, f"{digest}.json"]
        served = client.get(first.json()["url"])
        assert served.status_code == 200
        assert served.content == PNG
        assert served.headers["content-type"] == "image/png"
        assert served.headers["x-content-type-options"] == "nosniff"
        assert served.headers["content-security-policy"].startswith("sandbox")
        assert served.headers["content-disposition"].startswith("inline")


def test_a_file_not_shown_in_place_is_an_attachment(files_gateway: GatewayProcess) -> None:
    gateway = files_gateway
    with gateway.client(gateway.token(name="person")) as client:
        value = client.post(
            "/v1/files", files={"file": ("rows.json", b'[{"a": 1}]', "application/json")}
        ).json()
        served = client.get(value["url"])
    assert served.headers["content-type"] == "application/json"
    assert served.headers["content-disposition"].startswith("attachment")
    assert served.headers["content-security-policy"].startswith("sandbox")


@pytest.mark.parametrize(
    ("name", "data", "media_type", "status", "code"),
    [
        ("page.html", b"<script>alert(1)</script>", "text/html", 415, "media_type_not_allowed"),
        ("x.svg", b"<svg onload='alert(1)'/>", "image/svg+xml", 415, "media_type_not_allowed"),
        ("fake.png", b"<script>alert(1)</script>", "image/png", 422, "file_not_its_type"),
        ("bad.json", b"{not json", "application/json", 422, "file_not_its_type"),
        ("big.txt", b"x" * (LIMIT + 1), "text/plain", 413, "file_too_large"),
        ("huge.txt", b"x" * (LIMIT + 70_000), "text/plain", 413, "body_too_large"),
    ],
)
def test_an_upload_is_refused_past_its_limits(
    files_gateway: GatewayProcess, name: str, data: bytes, media_type: str, status: int, code: str
) -> None:
    gateway = files_gateway
    with gateway.client(gateway.token(name="person")) as client:
        answer = client.post("/v1/files", files={"file": (name, data, media_type)})
    assert answer.status_code == status, answer.text
    assert answer.json()["error"]["code"] == code


def test_only_a_person_uploads_and_an_unknown_file_is_not_found(
    files_gateway: GatewayProcess,
) -> None:
    gateway = files_gateway
    with gateway.client(gateway.token(source="agent")) as client:
        refused = client.post("/v1/files", files={"file": ("a.txt", b"hi", "text/plain")})
        missing = client.get("/v1/files/" + "0" * 64)
        odd = client.get("/v1/files/..%2f..%2fetc%2fpasswd")
    with gateway.client() as anonymous:
        unsigned = anonymous.get("/v1/files/" + "0" * 64)
    assert refused.status_code == 403
    assert refused.json()["error"]["code"] == "source_not_allowed"
    assert missing.status_code == 404
    assert missing.json()["error"]["code"] == "file_not_found"
    assert odd.status_code == 404
    assert unsigned.status_code == 401
