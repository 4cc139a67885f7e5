"""The gateway under clients that misbehave, through the real server: sockets
that never finish their request, a body far over the limit, and the headers the
UI page is served with."""

from __future__ import annotations

import json
import os
import resource
import socket
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator

import httpx
import pytest

from tests.lanes import Lane
from tests.stream.gateway.conftest import GatewayProcess, launch_gateway

pytestmark = [pytest.mark.broker, pytest.mark.timeout(180)]


@pytest.fixture(scope="module")
def deadline_gateway(module_lane: Lane) -> Iterator[GatewayProcess]:
    """One gateway with a request deadline of 1 s for the tests of that deadline:
    each keeps to connections and job keys of its own."""
    gateway = launch_gateway(module_lane, LEMONGRAPH_GATEWAY_REQUEST_TIMEOUT="1s")
    yield gateway
    gateway.stop()


def _open_partial(port: int, count: int) -> list[socket.socket]:
    """``count`` connections that each send half a request line and stop."""
    sockets = []
    for _ in range(count):
        sock = socket.create_connection(("127.0.0.1", port), timeout=5)
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Slow: ")
        sockets.append(sock)
    return sockets


def _closed_by_server(sock: socket.socket) -> bool:
    sock.setblocking(False)
    try:
        data = sock.recv(4096)
    except BlockingIOError:
        return False
    except OSError:
        return True  # reset: closed too
    finally:
        sock.setblocking(True)
    # A 408 may come first; what matters is that the server closes after it.
    if not data:
        return True
    sock.settimeout(1)
    try:
        while sock.recv(4096):
            pass
    except TimeoutError:
        return False
    except OSError:
        return True
    return True


def test_connections_that_never_finish_their_headers_are_closed(
    deadline_gateway: GatewayProcess,
) -> None:
    gateway = deadline_gateway
    port = int(gateway.api.rsplit(":", 1)[1])
    lines_before = sum(len(line) for line in gateway.lines)
    opened = time.monotonic()
    slow = _open_partial(port, 200)
    try:
        # The gateway answers others meanwhile.
        health = httpx.get(f"{gateway.api}/healthz", timeout=5)
        assert health.status_code == 200, health.text
        open_ = list(slow)
        while open_ and time.monotonic() - opened < 6:
            open_ = [s for s in open_ if not _closed_by_server(s)]
            time.sleep(0.1)
        took = time.monotonic() - opened
        assert not open_, f"{len(open_)} of 200 slow connections still open after {took:.1f}s"
        assert took < 6
        print(f"200 slow connections all closed by the server {took:.2f}s after opening")
        assert httpx.get(f"{gateway.api}/healthz", timeout=5).status_code == 200
    finally:
        for sock in slow:
            sock.close()
    logged = sum(len(line) for line in gateway.lines) - lines_before
    assert logged < 10_000, "".join(gateway.lines)[-3000:]


def test_a_slow_body_is_cut_off_and_what_came_is_not_taken_for_the_request(
    deadline_gateway: GatewayProcess,
) -> None:
    gateway = deadline_gateway
    port = int(gateway.api.rsplit(":", 1)[1])
    token = gateway.token(name="slow")
    start = b'{"key": "slow-1", "playbook_key": "onboarding"}'
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(
            b"POST /v1/jobs HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            + f"Authorization: Bearer {token}\r\nContent-Length: {len(start) + 50}\r\n\r\n".encode()
            + start
        )
        started = time.monotonic()
        answer = b""
        while chunk := sock.recv(4096):
            answer += chunk
        assert time.monotonic() - started < 5
    assert answer.startswith(b"HTTP/1.1 408"), answer
    assert b'"request_timeout"' in answer
    # The valid JSON that came before the cut is not a job start (taken, it
    # would read back within a second: the gateway's read-your-writes).
    with gateway.client(token) as client:
        for _ in range(10):
            assert client.get("/v1/jobs/slow-1").status_code == 404
            time.sleep(0.2)


def test_connections_beyond_the_bound_are_refused_and_the_gateway_answers_after(
    start_gateway: Callable[..., GatewayProcess],
) -> None:
    gateway = start_gateway(
        LEMONGRAPH_GATEWAY_REQUEST_TIMEOUT="30s", LEMONGRAPH_GATEWAY_MAX_CONNECTIONS="50"
    )
    port = int(gateway.api.rsplit(":", 1)[1])
    slow = _open_partial(port, 80)
    try:
        time.sleep(0.5)
        held = [s for s in slow if not _closed_by_server(s)]
        assert len(held) <= 50
        assert len(held) >= 45, len(held)  # beyond the 50 held, each is closed at once
        # Every held connection is served: the bound is the gateway's alone (at
        # uvicorn's limit_concurrency, one at the bound was answered text/plain 503).
        for sock in held:
            sock.sendall(b"1\r\n\r\n")
            status, headers, body = _answer(sock)
            assert (status, headers["content-type"]) == (200, "application/json"), body
    finally:
        for sock in slow:
            sock.close()
    assert wait_healthy(gateway)


def _answer(sock: socket.socket) -> tuple[int, dict[str, str], bytes]:
    """One answer read off ``sock``: its status, headers (lower-cased) and body
    (by Content-Length)."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        assert chunk, f"closed before an answer: {data!r}"
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = {k.strip().lower(): v.strip() for k, _, v in (h.partition(":") for h in lines[1:])}
    while len(body) < int(headers.get("content-length", "0")):
        chunk = sock.recv(65536)
        assert chunk, "closed in the body"
        body += chunk
    return int(lines[0].split()[1]), headers, body


def _get(path: str, *headers: str) -> bytes:
    return "\r\n".join([f"GET {path} HTTP/1.1", "Host: x", *headers]).encode() + b"\r\n\r\n"


def _closes(sock: socket.socket, within: float = 2.0) -> bool:
    """Does the server close ``sock`` within ``within`` seconds (nothing more read)?"""
    sock.settimeout(within)
    try:
        return sock.recv(4096) == b""
    except TimeoutError:
        return False
    except OSError:
        return True


def test_at_the_bound_the_oldest_idle_connection_makes_room(
    start_gateway: Callable[..., GatewayProcess],
) -> None:
    gateway = start_gateway(
        LEMONGRAPH_GATEWAY_REQUEST_TIMEOUT="30s", LEMONGRAPH_GATEWAY_MAX_CONNECTIONS="20"
    )
    port = int(gateway.api.rsplit(":", 1)[1])
    time.sleep(0.5)  # the readiness probes' connections are gone
    idle = []
    try:
        for _ in range(20):  # each kept alive after one answer, then idle
            sock = socket.create_connection(("127.0.0.1", port), timeout=5)
            sock.sendall(_get("/healthz"))
            assert _answer(sock)[0] == 200
            idle.append(sock)
        started = time.monotonic()
        # The 21st is served, and the oldest idle one was closed for it.
        assert httpx.get(f"{gateway.api}/healthz", timeout=5).status_code == 200
        assert _closes(idle[0])
        assert not _closes(idle[-1], within=0.2)
        assert time.monotonic() - started < 4  # within uvicorn's 5 s keep-alive
    finally:
        for sock in idle:
            sock.close()


def test_a_refused_request_closes_its_connection(
    start_gateway: Callable[..., GatewayProcess],
) -> None:
    gateway = start_gateway(LEMONGRAPH_RATE_LIMIT="0.01", LEMONGRAPH_RATE_BURST="1")
    port = int(gateway.api.rsplit(":", 1)[1])
    token = gateway.token(name="refused")
    for request, status, code in [
        (_get("/v1/jobs/x"), 401, "token_missing"),
        (_get("/v1/jobs/x", f"Authorization: Bearer {token}"), 404, "job_not_found"),
        (_get("/v1/jobs/x", f"Authorization: Bearer {token}"), 429, "rate_limited"),
    ]:
        with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
            sock.sendall(request)
            got, headers, body = _answer(sock)
            assert (got, json.loads(body)["error"]["code"]) == (status, code), body
            if status == 404:
                assert "connection" not in headers  # kept alive
                assert not _closes(sock, within=0.3)
            else:
                assert headers["connection"] == "close"
                assert _closes(sock)


def test_a_connection_is_closed_after_its_request_budget(shared_gateway: GatewayProcess) -> None:
    gateway = shared_gateway  # a connection of its own
    port = int(gateway.api.rsplit(":", 1)[1])
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        for number in range(1, 101):
            sock.sendall(_get("/healthz"))
            status, headers, _ = _answer(sock)
            assert status == 200
            assert (headers.get("connection") == "close") == (number == 100), number
        assert _closes(sock)


def test_a_kept_alive_connection_and_an_event_stream_outlive_the_deadline(
    deadline_gateway: GatewayProcess,
) -> None:
    gateway = deadline_gateway
    port = int(gateway.api.rsplit(":", 1)[1])
    token = gateway.token(name="long")
    _start_job(gateway, token, "long-1")
    with socket.create_connection(("127.0.0.1", port), timeout=10) as kept:
        kept.sendall(_get("/healthz"))
        assert _answer(kept)[0] == 200
        with socket.create_connection(("127.0.0.1", port), timeout=10) as stream:
            stream.sendall(_get("/v1/jobs/long-1/events", f"Authorization: Bearer {token}"))
            first = stream.recv(65536)
            assert first.startswith(b"HTTP/1.1 200"), first
            time.sleep(3)  # three deadlines, under uvicorn's 5 s keep-alive
            kept.sendall(_get("/healthz"))
            assert _answer(kept)[0] == 200  # the same connection, still open
            assert not _closes(stream, within=0.5)  # the stream too


def _start_job(gateway: GatewayProcess, token: str, key: str) -> None:
    with gateway.client(token) as client:
        posted = client.post("/v1/jobs", json={"key": key, "playbook_key": "onboarding"})
        assert posted.status_code == 202, posted.text
        for _ in range(50):
            if client.get(f"/v1/jobs/{key}").status_code == 200:
                return
            time.sleep(0.1)
    raise AssertionError(f"job {key} never readable")


def test_event_streams_are_bounded_per_token_and_in_all(
    start_gateway: Callable[..., GatewayProcess],
) -> None:
    gateway = start_gateway(
        LEMONGRAPH_GATEWAY_STREAMS_PER_TOKEN="2", LEMONGRAPH_GATEWAY_MAX_CONNECTIONS="10"
    )  # in all: half the bound, 5
    port = int(gateway.api.rsplit(":", 1)[1])
    tokens = [gateway.token(name=f"s{i}") for i in range(4)]
    _start_job(gateway, tokens[0], "streamed")
    opened: list[socket.socket] = []

    def stream(token: str) -> tuple[socket.socket, bytes]:
        sock = socket.create_connection(("127.0.0.1", port), timeout=5)
        opened.append(sock)
        sock.sendall(_get("/v1/jobs/streamed/events", f"Authorization: Bearer {token}"))
        data = sock.recv(65536)
        if not data.startswith(b"HTTP/1.1 200"):
            while chunk := sock.recv(65536):  # a refusal closes its connection
                data += chunk
        return sock, data

    try:
        for token in tokens[:2]:
            for _ in range(2):
                assert stream(token)[1].startswith(b"HTTP/1.1 200")
        sock, refused = stream(tokens[0])
        assert refused.startswith(b"HTTP/1.1 429"), refused
        assert b'"too_many_streams"' in refused
        assert stream(tokens[2])[1].startswith(b"HTTP/1.1 200")  # the 5th
        sock, refused = stream(tokens[3])
        assert refused.startswith(b"HTTP/1.1 503"), refused
        assert b'"streams_full"' in refused
        opened.pop(0).close()  # one ends: its place is free again
        time.sleep(0.5)
        assert stream(tokens[3])[1].startswith(b"HTTP/1.1 200")
    finally:
        for sock in opened:
            sock.close()


def wait_healthy(gateway: GatewayProcess, timeout: float = 20) -> bool:
    """The gateway answers ``/healthz`` 200 again within ``timeout`` (on a loaded
    machine it first works through the backlog the kernel queued for it); an
    AssertionError with its last answer and output when it does not."""
    deadline = time.monotonic() + timeout
    last = ""
    while time.monotonic() < deadline:
        try:
            response = httpx.get(f"{gateway.api}/healthz", timeout=2)
            if response.status_code == 200:
                return True
            last = f"{response.status_code} {response.text}"
        except httpx.TransportError as exc:
            last = repr(exc)
        time.sleep(0.1)
    raise AssertionError(f"never healthy again ({last}); output:\n" + "".join(gateway.lines[-40:]))


@pytest.mark.parametrize("chunked", [False, True])
def test_a_body_too_large_is_answered_413_that_the_client_reads(
    shared_gateway: GatewayProcess, chunked: bool
) -> None:
    gateway = shared_gateway  # refused: nothing written
    body = b'{"type": "x", "pad": "' + b"a" * (5 << 20) + b'"}'
    request = urllib.request.Request(
        f"{gateway.api}/v1/events",
        data=iter([body[i : i + 65536] for i in range(0, len(body), 65536)]) if chunked else body,
        method="POST",
        headers={
            "Authorization": f"Bearer {gateway.token(name='big')}",
            "Content-Type": "application/json",
            **({"Transfer-Encoding": "chunked"} if chunked else {}),
        },
    )
    with pytest.raises(urllib.error.HTTPError) as caught:
        urllib.request.urlopen(request, timeout=30)
    error = caught.value
    assert error.code == 413
    assert error.headers["Connection"] == "close"
    assert json.loads(error.read())["error"]["code"] == "body_too_large"
    assert wait_healthy(gateway)


def test_every_answer_of_both_ports_has_security_headers(shared_gateway: GatewayProcess) -> None:
    gateway = shared_gateway  # reads only
    token = gateway.token(name="headers")
    for base in (gateway.api, gateway.ui):
        for path, auth, status in [
            ("/docs", False, 200),
            ("/openapi.json", False, 200),
            ("/v1/jobs", True, 200),
            ("/v1/jobs", False, 401),
            ("/v1/jobs/nobody", True, 404),
            ("/no/such/page", False, 404),
        ]:
            headers = {"Authorization": f"Bearer {token}"} if auth else {}
            response = httpx.get(f"{base}{path}", headers=headers, timeout=10)
            assert response.status_code == status, (base, path, response.text)
            assert response.headers["X-Frame-Options"] == "DENY", (base, path)
            assert response.headers["X-Content-Type-Options"] == "nosniff", (base, path)
            csp = response.headers["Content-Security-Policy"]
            assert "frame-ancestors 'none'" in csp, (base, path)
            assert ("'unsafe-inline'" in csp) == (path == "/docs"), (base, path, csp)
    home = httpx.get(f"{gateway.api}/", timeout=10)
    assert "default-src 'none'" in home.headers["Content-Security-Policy"]


def test_the_ui_is_served_with_security_headers(shared_gateway: GatewayProcess) -> None:
    gateway = shared_gateway  # reads only
    for path in (
        "/",
        "/ui/",
        "/jobs/job-1",
        "/ui/app.js",
        "/ui/actions.js",
        "/ui/rich.js",
        "/ui/app.css",
    ):
        response = httpx.get(f"{gateway.ui}{path}", timeout=10)
        assert response.status_code == 200, path
        csp = response.headers["Content-Security-Policy"]
        assert "default-src 'self'" in csp
        assert "frame-ancestors 'none'" in csp
        assert "connect-src 'self'" in csp
        assert "unsafe-inline" not in csp
        assert response.headers["X-Frame-Options"] == "DENY"
        assert response.headers["X-Content-Type-Options"] == "nosniff"
        assert response.headers["Referrer-Policy"] == "no-referrer"


def test_running_out_of_file_descriptors_does_not_flood_the_log(
    start_gateway: Callable[..., GatewayProcess],
) -> None:
    gateway = start_gateway(LEMONGRAPH_GATEWAY_REQUEST_TIMEOUT="2s")
    pid = gateway.proc.pid
    in_use = len(os.listdir(f"/proc/{pid}/fd"))
    _, hard = resource.prlimit(pid, resource.RLIMIT_NOFILE)
    resource.prlimit(pid, resource.RLIMIT_NOFILE, (in_use + 20, hard))
    port = int(gateway.api.rsplit(":", 1)[1])
    before = sum(len(line) for line in gateway.lines)
    slow = _open_partial(port, 150)  # the kernel queues what the gateway cannot accept
    try:
        time.sleep(5)
        logged = "".join(gateway.lines)[before:]
        assert len(logged) < 5_000, logged[-3000:]
        assert "cannot accept connections" in logged
    finally:
        for sock in slow:
            sock.close()
    assert wait_healthy(gateway)
