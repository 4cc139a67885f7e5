"""Reply tokens: what one names comes back only with the secret, before its
expiry, whatever the case a mail system gave the address."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from topics.replies import (
    ReplyRoute,
    ReplyTokenError,
    normal_address,
    read_reply_address,
    read_reply_token,
    reply_address,
    reply_token,
)

SECRET = "s3cret"
NOW = 1_800_000_000


@given(job=st.text(min_size=1, max_size=200), contact=st.text(min_size=1, max_size=200))
def test_a_token_names_its_job_and_contact_back(job: str, contact: str) -> None:
    token = reply_token(SECRET, job, contact, NOW + 60)
    assert token == token.lower()
    assert read_reply_token(SECRET, token, NOW) == ReplyRoute(job, contact, NOW + 60)
    assert read_reply_token(SECRET, token.upper(), NOW).job_key == job


def reason(secret: str, token: str, now: int = NOW) -> str:
    with pytest.raises(ReplyTokenError) as caught:
        read_reply_token(secret, token, now)
    return caught.value.reason


def test_a_token_is_refused_unsigned_tampered_or_expired() -> None:
    token = reply_token(SECRET, "job-1", "ada@example.com", NOW + 60)
    assert reason(SECRET, "") == "unsigned"
    assert reason(SECRET, "hello") == "unsigned"
    assert reason("another secret", token) == "tampered"
    other = reply_token(SECRET, "job-2", "ada@example.com", NOW + 60)
    swapped = ".".join(other.split(".")[:2] + token.split(".")[2:])  # job-2 under job-1's mac
    assert reason(SECRET, swapped) == "tampered"
    parts = token.split(".")
    later = reply_token(SECRET, "j", "c", NOW + 10**6).split(".")[3]
    longer = ".".join([*parts[:3], later, parts[4]])
    assert reason(SECRET, longer) == "tampered"  # a later expiry under the old signature
    assert reason(SECRET, token, now=NOW + 61) == "expired"
    assert read_reply_token(SECRET, token, NOW + 60).contact == "ada@example.com"


def test_a_reply_address_is_read_for_its_domain_only() -> None:
    token = reply_token(SECRET, "job-1", "ada@example.com", NOW + 60)
    address = reply_address(token, "reply.example.org")
    assert address.startswith("reply+v1.")
    route = read_reply_address(SECRET, f"<{address.upper()}>", "reply.example.org", NOW)
    assert (route.job_key, route.kind) == ("job-1", "reply")
    bounce_token = reply_token(SECRET, "job-1", "ada@example.com", NOW + 60, "bounce")
    assert bounce_token.startswith("b1.")
    bounce = read_reply_address(
        SECRET, reply_address(bounce_token, "reply.example.org", "bounce"), "reply.example.org",
        NOW,
    )  # fmt: skip
    assert (bounce.job_key, bounce.contact, bounce.kind) == ("job-1", "ada@example.com", "bounce")
    for wrong in (
        address.replace("reply.example.org", "evil.example"),
        address.replace("reply+", "other+"),
        "nobody@reply.example.org",
    ):
        with pytest.raises(ReplyTokenError) as caught:
            read_reply_address(SECRET, wrong, "reply.example.org", NOW)
        assert caught.value.reason == "unsigned"


def test_no_secret_signs_nothing() -> None:
    with pytest.raises(ValueError, match="REPLY_TOKEN_SECRET"):
        reply_token("", "job-1", "ada", NOW)
    token = reply_token(SECRET, "job-1", "ada", NOW + 60)
    assert reason("", token) == "tampered"


def test_a_bounce_token_is_no_reply_address_and_a_reply_token_no_bounce_address() -> None:
    domain = "reply.example.org"
    reply = reply_token(SECRET, "job-1", "ada@example.com", NOW + 60)
    bounce = reply_token(SECRET, "job-1", "ada@example.com", NOW + 60, "bounce")
    for token, kind in ((bounce, "reply"), (reply, "bounce")):
        with pytest.raises(ReplyTokenError) as caught:
            read_reply_address(SECRET, reply_address(token, domain, kind), domain, NOW)
        assert caught.value.reason == "wrong_kind"
    # the tag is signed: relabelling one kind as the other breaks the signature
    relabelled = "b1." + reply.split(".", 1)[1]
    assert reason(SECRET, relabelled) == "tampered"
    with pytest.raises(ReplyTokenError) as caught:
        read_reply_token(SECRET, relabelled, NOW, "bounce")
    assert caught.value.reason == "tampered"


def test_an_address_is_compared_without_case_space_or_brackets_and_nothing_else() -> None:
    assert normal_address(" <Ada@Example.COM> ") == "ada@example.com"
    for other in ("ada+jobs@example.com", "a.da@example.com", "ada@mail.example.com"):
        assert normal_address(other) != normal_address("ada@example.com")
