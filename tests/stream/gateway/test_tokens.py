"""Tokens, the rate limit and the `lemongraph token` command (no broker needed)."""

from __future__ import annotations

import base64
import hashlib
import hmac
import subprocess
import time
from pathlib import Path

import orjson
import pytest

import stream.gateway
from stream.gateway import ApiError, mint_token, verify_token
from stream.gateway.ratelimit import RateLimiter
from stream.runtime.config import ConfigError, Settings
from tests.inprocess import lemongraph

NOW = 1_800_000_000.0
CLI_SECRET = "cli-secret-0123456789-0123456789-01"


def code_of(secret: str, token: str | None, now: float = NOW) -> str:
    with pytest.raises(ApiError) as caught:
        verify_token(secret, token, now=now)
    assert caught.value.status == 401
    return caught.value.code


def test_the_public_names_are_pinned() -> None:
    assert stream.gateway.__all__ == [
        "PREFIX",
        "SOURCES",
        "ApiError",
        "GatewayThread",
        "Principal",
        "addresses",
        "mint_token",
        "new_secret",
        "run_gateway",
        "serve",
        "ui_address",
        "verify_token",
    ]


def test_a_minted_token_verifies_with_its_claims() -> None:
    token = mint_token("s3cret", now=NOW, source="tool", name="executor", ttl_seconds=60)
    assert token.startswith("lemongraph_sk_")
    principal = verify_token("s3cret", token, now=NOW + 59)
    assert (principal.source, principal.name, principal.expires_at) == (
        "tool",
        "executor",
        NOW + 60,
    )
    assert code_of("s3cret", token, now=NOW + 60) == "token_expired"
    forever = mint_token("s3cret", now=NOW)
    assert verify_token("s3cret", forever, now=NOW + 10**9).expires_at is None


def test_tampering_is_detected() -> None:
    token = mint_token("s3cret", now=NOW, source="agent")
    payload, signature = token.removeprefix("lemongraph_sk_").split(".")
    claims = orjson.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    claims["src"] = "world"  # an agent token promoting itself
    forged = base64.urlsafe_b64encode(orjson.dumps(claims)).rstrip(b"=").decode()
    assert code_of("s3cret", f"lemongraph_sk_{forged}.{signature}") == "token_invalid"
    assert code_of("other", token) == "token_invalid"
    assert code_of("s3cret", token[:-1] + ("A" if token[-1] != "A" else "B")) == "token_invalid"
    assert code_of("s3cret", "lemongraph_sk_é.x") == "token_malformed"
    assert code_of("s3cret", None) == "token_missing"
    assert code_of("", token) == "auth_not_configured"


def test_minting_needs_a_secret_and_a_known_source() -> None:
    with pytest.raises(ValueError, match="API_TOKEN_SECRET"):
        mint_token("", now=NOW)
    with pytest.raises(ValueError, match="source"):
        mint_token("s", now=NOW, source="root")  # type: ignore[arg-type]


def test_the_rate_limit_is_a_token_bucket_per_identity() -> None:
    limiter = RateLimiter(rate=2.0, burst=2)
    assert [limiter.take("a", 0.0) for _ in range(2)] == [None, None]
    assert limiter.take("a", 0.0) == 1  # empty: one request refills in 0.5 s → 1 s
    assert limiter.take("b", 0.0) is None  # another token has its own bucket
    assert limiter.take("a", 0.5) is None
    assert limiter.take("a", 0.5) == 1
    slow = RateLimiter(rate=0.1, burst=1)
    assert slow.take("x", 0.0) is None
    assert slow.take("x", 0.0) == 10


def run_token(*args: str, secret: str, process: bool = False) -> subprocess.CompletedProcess[str]:
    """``lemongraph token ARGS``: in the test's process (tests/inprocess.py), or with
    ``process`` through the console script."""
    env = {"PATH": "/usr/bin:/bin", "API_TOKEN_SECRET": secret}
    return lemongraph("token", *args, env=env, cwd=Path.cwd(), process=process, timeout=60)


def test_the_token_command_prints_the_token_alone_on_its_last_line() -> None:
    # the console script as its own process (the module's other token commands run
    # in the test's process)
    result = run_token(
        "--source", "tool", "--ttl", "2h", "--name", "ops", secret=CLI_SECRET, process=True
    )
    assert result.returncode == 0, result.stderr
    last = result.stdout.strip().splitlines()[-1]
    assert last.startswith("lemongraph_sk_")
    assert " " not in last
    principal = verify_token(CLI_SECRET, last, now=time.time())
    assert (principal.source, principal.name) == ("tool", "ops")
    assert principal.expires_at is not None
    never = run_token("--ttl", "never", secret=CLI_SECRET)
    assert verify_token(CLI_SECRET, never.stdout.strip(), now=NOW).expires_at is None


def test_the_token_command_refuses_without_a_secret_or_with_a_bad_ttl() -> None:
    empty = run_token(secret="")
    assert empty.returncode != 0
    assert "API_TOKEN_SECRET" in empty.stderr
    bad = run_token("--ttl", "soon", secret=CLI_SECRET)
    assert bad.returncode != 0
    assert "--ttl" in bad.stderr
    short = run_token(secret="x")
    assert short.returncode != 0
    assert "API_TOKEN_SECRET is 1 bytes long: use at least 32" in short.stderr


def test_a_secret_under_32_bytes_is_refused_at_start_up(tmp_path: Path) -> None:
    absent = tmp_path / "absent.env"
    with pytest.raises(ConfigError, match="API_TOKEN_SECRET is 31 bytes long"):
        Settings.from_env({"API_TOKEN_SECRET": "s" * 31}, absent)
    assert Settings.from_env({"API_TOKEN_SECRET": "s" * 32}, absent).api_token_secret == "s" * 32
    assert Settings.from_env({}, absent).api_token_secret == ""  # empty: every call is 401
    assert len(stream.gateway.new_secret().encode()) >= 32  # what `lemongraph dev` makes up


def forged(secret: str, **claims: object) -> str:
    """A token signed with ``secret`` whose claims are exactly ``claims``."""
    payload = base64.urlsafe_b64encode(orjson.dumps(claims)).rstrip(b"=").decode()
    signature = hmac.new(secret.encode(), payload.encode(), hashlib.sha256).digest()
    return f"lemongraph_sk_{payload}.{base64.urlsafe_b64encode(signature).rstrip(b'=').decode()}"


@pytest.mark.parametrize("iat", ["soon", 1.5, None, [1], True])
def test_a_signed_token_whose_iat_is_not_an_integer_is_malformed(iat: object) -> None:
    token = forged("s3cret", v=1, src="world", name="x", iat=iat, nonce="n")
    assert code_of("s3cret", token) == "token_malformed"
    late = forged("s3cret", v=1, src="world", name="x", iat=1, exp="never", nonce="n")
    assert code_of("s3cret", late) == "token_malformed"
    fine = forged("s3cret", v=1, src="world", name="x", iat=7, nonce="n")
    assert verify_token("s3cret", fine, now=NOW).issued_at == 7


@pytest.mark.parametrize("exp", ["", [], {}, 0.0, True, False, "0"])
def test_a_signed_token_whose_exp_is_not_an_integer_is_malformed(exp: object) -> None:
    # A falsy exp ("", [], {}) once passed the check and then failed the
    # comparison with now: a 500, not a 401.
    token = forged("s3cret", v=1, src="world", name="x", iat=1, exp=exp, nonce="n")
    assert code_of("s3cret", token) == "token_malformed"


def test_a_signed_token_with_an_integer_exp_or_none_is_read() -> None:
    late = forged("s3cret", v=1, src="world", name="x", iat=1, exp=int(NOW) + 60, nonce="n")
    assert verify_token("s3cret", late, now=NOW).expires_at == int(NOW) + 60
    assert code_of("s3cret", late, now=NOW + 61) == "token_expired"
    expired = forged("s3cret", v=1, src="world", name="x", iat=1, exp=0, nonce="n")
    assert code_of("s3cret", expired) == "token_expired"
    endless = forged("s3cret", v=1, src="world", name="x", iat=1, nonce="n")
    assert verify_token("s3cret", endless, now=NOW).expires_at is None


def test_the_write_timeout_is_a_setting() -> None:
    absent = Path("/nonexistent")
    assert Settings.from_env({}, absent).gateway_write_timeout == 1.5  # within 2 s
    timed = Settings.from_env({"LEMONGRAPH_GATEWAY_WRITE_TIMEOUT": "700ms"}, absent)
    assert timed.gateway_write_timeout == pytest.approx(0.7)
    with pytest.raises(ConfigError, match="LEMONGRAPH_GATEWAY_WRITE_TIMEOUT"):
        Settings.from_env({"LEMONGRAPH_GATEWAY_WRITE_TIMEOUT": "0"}, absent)


def test_the_approver_role_is_a_world_tokens_and_signed_like_its_other_claims() -> None:
    approver = verify_token("s3cret", mint_token("s3cret", now=NOW, approver=True), now=NOW)
    assert (approver.source, approver.approver) == ("world", True)
    assert not verify_token("s3cret", mint_token("s3cret", now=NOW), now=NOW).approver
    with pytest.raises(ValueError, match="only a world token"):
        mint_token("s3cret", now=NOW, source="agent", approver=True)
    # an agent token claiming the role, signed (a leaked secret aside): malformed
    claimed = forged("s3cret", v=1, src="agent", name="x", iat=1, nonce="n", roles=["approver"])
    assert code_of("s3cret", claimed) == "token_malformed"
    for roles in ("approver", [1], {"approver": True}):
        assert code_of("s3cret", forged("s3cret", v=1, src="world", iat=1, roles=roles)) == (
            "token_malformed"
        )
    # the role added to a minted token breaks its signature
    payload, signature = mint_token("s3cret", now=NOW)[len("lemongraph_sk_") :].split(".")
    claims = orjson.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    grown = base64.urlsafe_b64encode(orjson.dumps({**claims, "roles": ["approver"]}))
    tampered = f"lemongraph_sk_{grown.rstrip(b'=').decode()}.{signature}"
    assert code_of("s3cret", tampered) == "token_invalid"


def test_the_token_command_mints_an_approvers_token_with_approver() -> None:
    result = run_token("--approver", "--name", "ops-lead", secret=CLI_SECRET)
    assert result.returncode == 0, result.stderr
    principal = verify_token(CLI_SECRET, result.stdout.strip().splitlines()[-1], now=time.time())
    assert (principal.source, principal.name, principal.approver) == ("world", "ops-lead", True)
    refused = run_token("--approver", "--source", "agent", secret=CLI_SECRET)
    assert refused.returncode != 0
    assert "world" in refused.stderr
