"""The gateway's HTTP API through the real server and the real embedded broker:
every status code of docs/api.md, tokens, the empty secret, the rate limit,
read-your-writes and source stamping; the live event stream and a person's
message in tests/stream/gateway/test_api_streams.py."""

from __future__ import annotations

import base64
import hmac
import time
from collections.abc import Callable
from typing import Any

import httpx
import orjson
import pytest

from stream.gateway import mint_token
from tests.stream.gateway.conftest import GatewayProcess, Lane, WorkerProcess, wait_for
from topics import JournalRun, JournalToolCall, encode
from topics.replies import reply_address, reply_token

pytestmark = [pytest.mark.broker, pytest.mark.timeout(180)]


def error_of(response: httpx.Response) -> dict[str, Any]:
    body = response.json()
    assert set(body) == {"error"}, body
    assert set(body["error"]) == {"code", "message"}, body
    assert "Traceback" not in response.text
    detail: dict[str, Any] = body["error"]
    return detail


def job_view(client: httpx.Client, key: str) -> dict[str, Any]:
    response = client.get(f"/v1/jobs/{key}")
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


def milestone(view: dict[str, Any], mid: str) -> dict[str, Any]:
    return next(m for m in view["milestones"] if m["id"] == mid)


def test_a_job_is_started_read_back_and_moved_by_an_event(
    lane: Lane, gateway: GatewayProcess
) -> None:
    with gateway.client(gateway.token(name="t1")) as client:
        started = client.post("/v1/jobs", json={"key": "job-1", "playbook_key": "onboarding"})
        assert started.status_code == 202, started.text
        assert started.json()["type"] == "job.start"
        # Read-your-writes: no worker runs yet, and the job reads back at once.
        view = job_view(client, "job-1")
        assert view["status"] == "starting"
        assert view["accepted"] is True
        assert [m["state"] for m in view["milestones"]] == ["pending"] * 4
        assert [w["type"] for w in view["pending_writes"]] == ["job.start"]
        listed = client.get("/v1/jobs", params={"status": "starting"}).json()
        assert [j["key"] for j in listed["jobs"]] == ["job-1"]
        # The key is taken, whether a worker decided it yet or not.
        again = client.post("/v1/jobs", json={"key": "job-1", "playbook_key": "onboarding"})
        assert again.status_code == 409
        assert error_of(again)["code"] == "job_exists"

        event = {"key": "job-1", "action": "id_uploaded", "idempotency_key": "upload-1"}
        first = client.post("/v1/events", json=event)
        assert first.status_code == 202, first.text
        assert first.json()["source"] == "world"
        assert first.json()["event_id"] == "upload-1"
        retry = client.post("/v1/events", json=event)
        assert retry.status_code == 202
        assert retry.json()["duplicate"] is True
        assert job_view(client, "job-1")["pending_writes"][-1]["action"] == "id_uploaded"

        lane.start_worker()
        view = wait_for(
            lambda: (
                (v := job_view(client, "job-1"))["status"] == "running"
                and milestone(v, "collectIdentity")["state"] == "done"
                and v
            ),
            what="collectIdentity done",
        )
        assert view["accepted"] is False
        assert view["pending_writes"] == []
        done = milestone(view, "collectIdentity")
        assert done["explanation"]["verdict"] == "TRUE"
        assert [e["id"] for e in done["evidence"]] == ["upload-1"]
        assert done["evidence"][0]["source"] == "world"
        assert view["frontier"] == ["bookCall", "selfServe"]
        assert view["next_step"] == "bookCall"
        assert milestone(view, "bookCall")["next_best"] is True
        assert milestone(view, "bookCall")["deadline"]
        assert {t["milestone"] for t in view["timers"]} == {"bookCall", "selfServe"}

        trail = wait_for(
            lambda: (d := client.get("/v1/jobs/job-1/decisions").json())["kept"] >= 2 and d,
            what="two decisions",
        )
        inputs = [d["input"] for d in trail["decisions"]]
        assert [i["type"] for i in inputs] == ["job.start", "event"]  # the retry applied once
        assert trail["decisions"][1]["verdicts"][0]["atoms"][0]["evidence"] == ["upload-1"]

        assert client.get("/v1/jobs", params={"status": "running"}).json()["total"] == 1
        assert client.get("/v1/jobs", params={"status": "done"}).json()["jobs"] == []


def test_jobs_are_listed_a_page_at_a_time(shared_gateway: GatewayProcess) -> None:
    gateway = shared_gateway  # its own keys (page-*); counts relative to the jobs before
    with gateway.client(gateway.token()) as client:
        before = client.get("/v1/jobs").json()["total"]
        for i in range(5):
            body = {"key": f"page-{i}", "playbook_key": "payment-reminders"}
            assert client.post("/v1/jobs", json=body).status_code == 202
        seen: list[str] = []
        cursor = None
        while True:
            params: dict[str, Any] = {"limit": 2}
            if cursor:
                params["cursor"] = cursor
            page = client.get("/v1/jobs", params=params).json()
            assert page["total"] == before + 5
            seen.extend(j["key"] for j in page["jobs"])
            cursor = page["next"]
            if cursor is None:
                break
        assert len(seen) == before + 5  # every job once
        assert [k for k in seen if k.startswith("page-")] == [f"page-{i}" for i in range(5)]
        bad = client.get("/v1/jobs", params={"status": "sleeping"})
        assert bad.status_code == 422
        assert error_of(bad)["code"] == "invalid_query"


def test_bad_requests_get_clear_errors(shared_gateway: GatewayProcess) -> None:
    gateway = shared_gateway  # refusals and reads only: no job made
    with gateway.client(gateway.token()) as client:
        before = client.get("/v1/jobs").json()["total"]
        unknown = client.post("/v1/jobs", json={"key": "j", "playbook_key": "nope"})
        assert unknown.status_code == 404
        assert error_of(unknown)["code"] == "playbook_not_found"
        no_job = client.post("/v1/events", json={"key": "ghost", "action": "x"})
        assert no_job.status_code == 404
        assert error_of(no_job)["code"] == "job_not_found"
        assert error_of(client.get("/v1/jobs/ghost"))["code"] == "job_not_found"
        assert client.get("/v1/jobs/ghost/decisions").status_code == 404
        assert client.get("/v1/jobs/ghost/events").status_code == 404
        assert error_of(client.get("/v1/playbooks/nope"))["code"] == "playbook_not_found"
        assert client.get("/v1/playbooks/onboarding", params={"version": 9}).status_code == 404

        broken = client.post(
            "/v1/jobs", content=b'{"key": ', headers={"Content-Type": "application/json"}
        )
        assert broken.status_code == 400
        assert error_of(broken)["code"] == "malformed_json"
        invalid = client.post("/v1/jobs", json={"key": "", "playbook_key": 3})
        assert invalid.status_code == 422
        assert error_of(invalid)["code"] == "invalid_body"
        assert client.post("/v1/events", json=["not", "an", "object"]).status_code == 422
        # What the inbox could not carry faithfully is refused, not half-applied.
        for value in (b"123456789012345678901234567890", b"1e400"):
            odd = client.post(
                "/v1/events",
                content=b'{"key": "ghost", "action": "a", "value": ' + value + b"}",
                headers={"Content-Type": "application/json"},
            )
            assert odd.status_code == 422, odd.text
        huge = client.post("/v1/jobs", json={"key": "j", "playbook_key": "x" * 70_000})
        assert huge.status_code == 413
        assert error_of(huge)["code"] == "body_too_large"

        assert error_of(client.get("/v1/nothing-here"))["code"] == "not_found"
        assert error_of(client.delete("/v1/jobs"))["code"] == "method_not_allowed"

        # Nothing half-applied: none of the refused writes made a job.
        assert client.get("/v1/jobs").json()["total"] == before
        assert client.get("/v1/jobs/j").status_code == 404


def test_playbooks_are_listed_and_read(shared_gateway: GatewayProcess) -> None:
    gateway = shared_gateway  # refusals and reads only: no job made
    with gateway.client(gateway.token()) as client:
        listed = client.get("/v1/playbooks").json()
        keys = [p["key"] for p in listed["playbooks"]]
        assert keys == ["lead-qualification", "onboarding", "payment-reminders"]
        onboarding = client.get("/v1/playbooks/onboarding").json()
        assert onboarding["version"] == 1
        assert onboarding["versions"] == [1]
        ids = [m["id"] for m in onboarding["spec"]["milestones"]]
        assert ids[0] == "collectIdentity"


def test_tokens_are_checked(shared_gateway: GatewayProcess) -> None:
    gateway = shared_gateway  # refusals and reads only: no job made
    good = gateway.token(ttl_seconds=3600)
    with gateway.client(good) as client:
        assert client.get("/v1/jobs").status_code == 200
    prefix, rest = good[: len("lemongraph_sk_")], good[len("lemongraph_sk_") :]
    payload, signature = rest.split(".")
    # Flip the source claim inside the payload: the signature no longer matches.
    claims = orjson.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    claims["src"] = "tool"
    forged = base64.urlsafe_b64encode(orjson.dumps(claims)).rstrip(b"=").decode()
    expired = gateway.token(ttl_seconds=-1)
    foreign = mint_token("another-secret", now=time.time())
    cases = {
        "token_invalid": [
            f"{prefix}{forged}.{signature}",
            f"{prefix}{payload}.{signature[:-2]}AA",
            foreign,
        ],
        "token_expired": [expired],
        "token_malformed": ["lemongraph_sk_nodot", "sk_live_123.abc", "lemongraph_sk_a.b.c"],
    }
    for code, tokens in cases.items():
        for token in tokens:
            with gateway.client(token) as client:
                response = client.get("/v1/jobs")
                assert response.status_code == 401, token
                assert error_of(response)["code"] == code, token
                assert response.headers["WWW-Authenticate"].startswith("Bearer")
    missing = httpx.get(f"{gateway.api}/v1/jobs")
    assert missing.status_code == 401
    assert error_of(missing)["code"] == "token_missing"
    # A bad token is refused before the body is read.
    with gateway.client("junk") as client:
        assert client.post("/v1/jobs", content=b"{not json").status_code == 401


def test_an_empty_secret_refuses_every_v1_call(
    start_gateway: Callable[..., GatewayProcess],
) -> None:
    gateway = start_gateway(API_TOKEN_SECRET="")
    token = mint_token("whatever", now=time.time())
    calls = [
        ("GET", "/v1/jobs"),
        ("GET", "/v1/jobs/x"),
        ("GET", "/v1/playbooks"),
        ("POST", "/v1/jobs"),
        ("POST", "/v1/events"),
    ]
    for method, path in calls:
        for headers in ({}, {"Authorization": f"Bearer {token}"}):
            response = httpx.request(method, gateway.api + path, headers=headers, json={})
            assert response.status_code == 401, (method, path)
            error = error_of(response)
            assert error["code"] == "auth_not_configured"
            assert "API_TOKEN_SECRET" in error["message"]
    assert httpx.get(f"{gateway.api}/healthz").status_code == 200
    assert any("API_TOKEN_SECRET is empty" in line for line in gateway.lines)


def test_each_token_has_its_own_rate_limit(
    start_gateway: Callable[..., GatewayProcess],
) -> None:
    gateway = start_gateway(LEMONGRAPH_RATE_LIMIT="0.5", LEMONGRAPH_RATE_BURST="3")
    busy, other = gateway.token(name="busy"), gateway.token(name="other")
    with gateway.client(busy) as client:
        codes = [client.get("/v1/playbooks").status_code for _ in range(3)]
        assert codes == [200, 200, 200]
        limited = client.get("/v1/playbooks")
        assert limited.status_code == 429
        assert error_of(limited)["code"] == "rate_limited"
        assert int(limited.headers["Retry-After"]) >= 1
    with gateway.client(other) as client:
        assert client.get("/v1/playbooks").status_code == 200
    with gateway.client(busy) as client:
        time.sleep(2.1)  # one request's worth refills in 2 s
        assert client.get("/v1/playbooks").status_code == 200


def test_the_token_stamps_the_source_and_a_body_cannot(
    module_lane: Lane, shared_gateway: GatewayProcess
) -> None:
    gateway = shared_gateway  # its own job key, stamp-1
    world = gateway.client(gateway.token(source="world"))
    agent = gateway.client(gateway.token(source="agent"))
    with world, agent:
        assert (
            world.post(
                "/v1/jobs", json={"key": "stamp-1", "playbook_key": "onboarding"}
            ).status_code
            == 202
        )
        claim = agent.post("/v1/events", json={"key": "stamp-1", "action": "id_uploaded"})
        assert claim.status_code == 202
        assert claim.json()["source"] == "agent"
        smuggled = agent.post(
            "/v1/events", json={"key": "stamp-1", "action": "id_uploaded", "source": "world"}
        )
        assert smuggled.status_code == 422
        assert "source" in error_of(smuggled)["message"]
    inbox = [r["value"] for r in module_lane.read("inbox") if r["key"] == "stamp-1"]
    assert [(m["type"], m.get("source")) for m in inbox] == [
        ("job.start", None),
        ("event", "agent"),
    ]


def test_healthz_and_the_docs_need_no_token(shared_gateway: GatewayProcess) -> None:
    gateway = shared_gateway  # refusals and reads only: no job made
    health = httpx.get(f"{gateway.api}/healthz").json()
    assert health["status"] == "ok"
    assert health["broker"] is True
    assert health["caught_up"] is True
    schema = httpx.get(f"{gateway.api}/openapi.json").json()
    assert {"/v1/jobs", "/v1/events", "/v1/jobs/{key}", "/v1/playbooks"} <= set(schema["paths"])
    assert schema["components"]["securitySchemes"]["HTTPBearer"]["scheme"] == "bearer"
    docs = httpx.get(f"{gateway.api}/docs")
    assert docs.status_code == 200
    assert "/docs/assets/swagger-ui-bundle.js" in docs.text
    assert "cdn" not in docs.text.lower()
    assert httpx.get(f"{gateway.api}/docs/assets/swagger-ui-bundle.js").status_code == 200
    # The UI port serves the page and the same API, on one origin.
    assert "lemongraph" in httpx.get(gateway.ui + "/").text
    assert httpx.get(f"{gateway.ui}/healthz").status_code == 200


def test_a_jobs_journal_is_served_newest_last(
    module_lane: Lane, shared_gateway: GatewayProcess
) -> None:
    lane, gateway = module_lane, shared_gateway  # its own job key, job-j
    with gateway.client(gateway.token()) as client:
        assert (
            client.post("/v1/jobs", json={"key": "job-j", "playbook_key": "onboarding"}).status_code
            == 202
        )
        call = JournalToolCall(
            job_key="job-j",
            run_id="job-j#1",
            agent="conversation",
            at="2026-01-05T09:00:00Z",
            tool="schedule_meeting",
            task_id="job-j/bookCall",
            arguments='{"when": "10:00"}',
            outcome="done",
            key="lg-1",
            result='{"ok":true}',
            latency_ms=12,
            fact="meeting_scheduled",
        )
        ended = JournalRun(
            job_key="job-j", run_id="job-j#1", agent="conversation", at="2026-01-05T09:00:01Z",
            ended="done", turns=2, tool_calls=1, tokens=300,
        )  # fmt: skip
        lane.produce([(b"job-j", encode(call)), (b"job-j", encode(ended))], topic="journal")
        journal = wait_for(
            lambda: (j := client.get("/v1/jobs/job-j/journal").json())["kept"] >= 2 and j,
            what="two journal records",
        )
        assert [r["type"] for r in journal["records"]] == ["journal.tool_call", "journal.run"]
        assert journal["records"][0]["fact"] == "meeting_scheduled"
        assert (
            client.get("/v1/jobs/job-j/journal", params={"limit": 1}).json()["records"][0]["type"]
            == "journal.run"
        )
        assert error_of(client.get("/v1/jobs/ghost/journal"))["code"] == "job_not_found"


def test_the_inbound_email_webhook_takes_signed_verified_replies_only(
    module_lane: Lane,
    module_worker: WorkerProcess,
    start_module_gateway: Callable[..., GatewayProcess],
    shared_gateway: GatewayProcess,
) -> None:
    # A gateway of its own (the secrets are read at its start) on the module's
    # worker; its own job key (job-w), and the journal's records after its start.
    lane, gateway = module_lane, shared_gateway
    secrets = {"LEMONGRAPH_INBOUND_SECRET": "hook-secret", "REPLY_TOKEN_SECRET": "reply-secret",
               "REPLY_DOMAIN": "reply.test"}  # fmt: skip
    earlier = {(r["partition"], r["offset"]) for r in lane.read("journal")}
    hooked = start_module_gateway(**secrets)
    now = int(time.time())

    def signed(payload: dict[str, Any], secret: str = "hook-secret") -> tuple[bytes, str]:
        raw = orjson.dumps(payload)
        return raw, "sha256=" + hmac.new(secret.encode(), raw, "sha256").hexdigest()

    def post(client: httpx.Client, payload: dict[str, Any], **kw: str) -> httpx.Response:
        raw, signature = signed(payload, **kw)
        return client.post(
            "/v1/inbound/email", content=raw,
            headers={"X-Lemongraph-Signature": signature, "Content-Type": "application/json"},
        )  # fmt: skip

    address = reply_address(reply_token("reply-secret", "job-w", "ada@example.com", now + 600),
                            "reply.test")  # fmt: skip
    reply = {"to": address, "from": "Ada <ada@example.com>", "message_id": "<w1@mail.example>",
             "text": "Tomorrow at ten, please.\n\nOn Tue, Agent wrote:\n> When?"}  # fmt: skip
    with hooked.client(hooked.token()) as client:
        assert (
            client.post("/v1/jobs", json={"key": "job-w", "playbook_key": "onboarding"}).status_code
            == 202
        )
        anonymous = httpx.Client(base_url=hooked.api)
        # no bearer token needed, but the signature is
        assert (
            error_of(anonymous.post("/v1/inbound/email", json=reply))["code"] == "signature_invalid"
        )
        assert error_of(post(anonymous, reply, secret="wrong"))["code"] == "signature_invalid"
        taken = post(anonymous, reply)
        assert taken.status_code == 202, taken.text
        answer = taken.json()
        assert (answer["kind"], answer["duplicate"]) == ("reply", False)
        assert post(anonymous, reply).json()["duplicate"] is True  # a provider's retry
        expired = dict(
            reply,
            to=reply_address(
                reply_token("reply-secret", "job-w", "ada@example.com", now - 1), "reply.test"
            ),
        )
        tampered = dict(reply, to=address.replace("reply+v1.", "reply+v1.a"))
        for bad, why in ((expired, "expired"), (tampered, "tampered")):
            refused = post(anonymous, bad)
            assert refused.status_code == 403
            assert error_of(refused)["code"] == "reply_refused"
            assert why in error_of(refused)["message"]
        assert error_of(post(anonymous, {"to": address, "text": 5}))["code"] == "invalid_body"
        # the reply address is Ada's: anyone else's mail through it is not taken
        for stranger in ("Mallory <mallory@evil.example>", "ada+jobs@example.com", None):
            strange = dict(reply, message_id=f"<s-{stranger}@x>", **{"from": stranger})
            held = post(anonymous, strange)
            assert held.status_code == 403, held.text
            assert error_of(held)["code"] == "sender_not_contact"
        # her own, in another case, is
        again = dict(reply, message_id="<w2@mail.example>", text="Or eleven.",
                     **{"from": "<ADA@Example.com>"})  # fmt: skip
        assert post(anonymous, again).json()["kind"] == "reply"
        bounce_token = reply_token("reply-secret", "job-w", "ada@example.com", now + 600, "bounce")
        bounce = {"to": reply_address(bounce_token, "reply.test", "bounce"),
                  "message_id": "<b1@mx>", "reason": "5.1.1 user unknown"}  # fmt: skip
        # a reply token is no bounce address, a bounce token no reply address
        for crossed in (address.replace("reply+", "bounce+"),
                        bounce["to"].replace("bounce+", "reply+")):  # fmt: skip
            refused = post(anonymous, dict(bounce, to=crossed))
            assert error_of(refused)["code"] == "reply_refused"
            assert "wrong_kind" in error_of(refused)["message"]
        assert post(anonymous, bounce).json()["kind"] == "bounce"
        anonymous.close()
        trail = wait_for(
            lambda: len(d := client.get("/v1/jobs/job-w/decisions").json()["decisions"]) >= 4 and d,
            what="the events decided",
        )
        actions = [d["input"].get("action") for d in trail if d["input"]["type"] == "event"]
        assert actions == ["message_received", "message_received", "email_bounced"]
        talk = wait_for(
            lambda: len((m := client.get("/v1/jobs/job-w/messages").json())["messages"]) >= 2 and m,
            what="the replies",
        )
        assert [(m["channel"], m["contact"], m["text"]) for m in talk["messages"]] == [
            ("email", "ada@example.com", "Tomorrow at ten, please."),
            ("email", "ada@example.com", "Or eleven."),
        ]
    # the default gateway has no inbound secret: the webhook takes nothing
    with httpx.Client(base_url=gateway.api) as plain:
        assert (
            error_of(plain.post("/v1/inbound/email", json=reply))["code"]
            == "inbound_not_configured"
        )
    journal = [
        r["value"] for r in lane.read("journal") if (r["partition"], r["offset"]) not in earlier
    ]
    refusals = [r for r in journal if r.get("outcome") == "refused"]
    assert len(refusals) == 4
    held = [r for r in journal if r.get("outcome") == "unverified"]
    assert [(h["job_key"], h.get("address"), h["contact"]) for h in held] == [
        ("job-w", "mallory@evil.example", "ada@example.com"),
        ("job-w", "ada+jobs@example.com", "ada@example.com"),
        ("job-w", None, "ada@example.com"),
    ]
