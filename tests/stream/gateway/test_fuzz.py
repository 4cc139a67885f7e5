"""A property-based fuzz of the API from its own OpenAPI document (schemathesis):
whatever a generated request holds, the gateway never answers 500."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.stream.gateway.conftest import GatewayProcess

if TYPE_CHECKING:
    import schemathesis

pytestmark = [pytest.mark.broker, pytest.mark.slow, pytest.mark.timeout(300)]

#: The event stream never ends by design; its status codes are tested in test_api.
STREAMING = "/v1/jobs/{key}/events"
#: Half of the generated write bodies point at what exists, so that accepted
#: writes (202) are fuzzed too, not only the 404s of random keys.
ANCHORS = {"/v1/events": {"key": "fuzz-job"}, "/v1/jobs": {"playbook_key": "onboarding"}}


def anchored(case: schemathesis.Case, anchor: dict[str, Any], use: bool) -> schemathesis.Case:
    if use and isinstance(case.body, dict):
        case.body = {**case.body, **anchor}
    return case


def test_no_generated_request_gets_a_server_error(gateway: GatewayProcess) -> None:
    # schemathesis (0.3-0.5 s of CPU to import) is imported by the one test that uses
    # it, not by every test process collecting the suite; its pytest plugin is off
    # (pyproject.toml, addopts): docs/operations.md, "How long a start takes".
    import schemathesis
    from schemathesis import GenerationMode
    from schemathesis.checks import not_a_server_error

    token = gateway.token(name="fuzz")
    headers = {"Authorization": f"Bearer {token}"}
    # A job that exists, so that generated events and reads also reach past the 404.
    with gateway.client(token) as client:
        body = {"key": "fuzz-job", "playbook_key": "onboarding"}
        assert client.post("/v1/jobs", json=body).status_code == 202
    schema = schemathesis.openapi.from_url(f"{gateway.api}/openapi.json")
    operations = [result.ok() for result in schema.get_all_operations()]
    assert len(operations) >= 7
    exercised = 0
    statuses: dict[int, int] = {}
    for operation in operations:
        if operation.path == STREAMING:
            continue

        strategy = st.one_of(
            operation.as_strategy(GenerationMode.POSITIVE),
            operation.as_strategy(GenerationMode.NEGATIVE),
        )
        anchor = ANCHORS.get(operation.path)
        if anchor is not None:
            strategy = st.builds(anchored, strategy, st.just(anchor), st.booleans())

        @given(case=strategy)
        @settings(
            max_examples=60,
            deadline=None,
            database=None,
            suppress_health_check=list(HealthCheck),
        )
        def fuzz(case: schemathesis.Case) -> None:
            response = case.call_and_validate(
                base_url=gateway.api, headers=headers, checks=[not_a_server_error], timeout=30
            )
            statuses[response.status_code] = statuses.get(response.status_code, 0) + 1

        fuzz()
        exercised += 1
    assert exercised == len(operations) - 1
    print(f"fuzz: {sum(statuses.values())} requests; status codes {sorted(statuses.items())}")
    assert {200, 202, 404, 422} <= set(statuses), statuses  # reads, writes, refusals
    assert not any("unexpected error" in line for line in gateway.lines), "".join(gateway.lines)
