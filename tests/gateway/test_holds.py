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
from collections.abc import Callable

import httpx
import pytest

from .conftest import GatewayProcess

pytestmark = [pytest.mark.broker, pytest.mark.timeout(180)]


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
    start_gateway: Callable[..., GatewayProcess],
) -> None:
    gateway = start_gateway(LEMONGRAPH_GATEWAY_REQUEST_TIMEOUT="1s")
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
    start_gateway: Callable[..., GatewayProcess],
) -> None:
    gateway = start_gateway(LEMONGRAPH_GATEWAY_REQUEST_TIMEOUT="1s")
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
        closed = sum(_closed_by_server(s) for s in slow)
        assert closed >= 25, closed  # beyond the 50 held, each is closed at once
    finally:
        for sock in slow:
            sock.close()
    assert wait_healthy(gateway)


def wait_healthy(gateway: GatewayProcess) -> bool:
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"{gateway.api}/healthz", timeout=2).status_code == 200:
                return True
        except httpx.TransportError:
            pass
        time.sleep(0.1)
    return False


@pytest.mark.parametrize("chunked", [False, True])
def test_a_body_too_large_is_answered_413_that_the_client_reads(
    gateway: GatewayProcess, chunked: bool
) -> None:
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


def test_the_ui_is_served_with_security_headers(gateway: GatewayProcess) -> None:
    for path in ("/", "/jobs/job-1", "/ui/app.js", "/ui/app.css"):
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
