"""The job page's milestone graph in headless Chromium (the helpers of
tests/stream/gateway/browser.py) draws no false dependency: with a playbook whose edges skip
levels (tests/stream/gateway/skip-levels.yaml: ``settled`` needs ``paidOnTime`` one level
down and ``escalate`` two levels down), every edge leaves its need's box and enters
its milestone's box and passes through no other box, measured on the drawn paths;
there is one edge per need, each with its arrow."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import Browser

from tests.lanes import wait_for
from tests.stream.gateway.browser import ARTIFACTS, new_page, shot
from tests.stream.gateway.conftest import GatewayProcess, Lane

pytestmark = [pytest.mark.broker, pytest.mark.browser, pytest.mark.timeout(240)]

PLAYBOOK = Path(__file__).with_name("skip-levels.yaml")
NEEDS = {
    ("invoiceSent", "paidOnTime"),
    ("invoiceSent", "reminded"),
    ("paidOnTime", "settled"),
    ("escalate", "settled"),  # two levels down
    ("settled", "archived"),
    ("reminded", "archived"),  # two levels down
}

# For every `path.edge`: the boxes its two ends touch, and every other box one of
# its points falls in (sampled each unit of its length), in screen coordinates.
# A point within SLACK of a box's border counts as in it: an edge grazing a box
# reads as one through it.
MEASURE = """(slack) => {
  const boxes = [...document.querySelectorAll("#graph g.node")].map((g) => {
    const r = g.querySelector("rect").getBoundingClientRect();
    return { id: g.dataset.milestone, r };
  });
  const near = (p, r, d) => p.x >= r.left - d && p.x <= r.right + d
    && p.y >= r.top - d && p.y <= r.bottom + d;
  const touching = (p) => boxes.filter((b) => near(p, b.r, 2)).map((b) => b.id);
  return [...document.querySelectorAll("#graph path.edge")].map((path) => {
    const ctm = path.getScreenCTM();
    const length = path.getTotalLength();
    const at = (l) => {
      const q = path.getPointAtLength(l);
      return new DOMPoint(q.x, q.y).matrixTransform(ctm);
    };
    const from = touching(at(0)), to = touching(at(length));
    const crossed = new Set();
    for (let l = 0; l <= length; l += 1) {
      const p = at(l);
      for (const b of boxes) {
        if (!from.includes(b.id) && !to.includes(b.id) && near(p, b.r, slack)) crossed.add(b.id);
      }
    }
    return { from, to, crossed: [...crossed], marker: path.getAttribute("marker-end") };
  });
}"""
SLACK = 3


def test_no_edge_passes_through_a_box_other_than_its_own_two_ends(
    lane: Lane, gateway: GatewayProcess, browser: Browser
) -> None:
    shutil.copy(PLAYBOOK, lane.playbooks / PLAYBOOK.name)
    lane.start_worker()
    token = gateway.token(name="browser")
    with gateway.client(token) as client:
        started = client.post("/v1/jobs", json={"key": "graph-1", "playbook_key": "skip-levels"})
        assert started.status_code == 202
        wait_for(
            lambda: client.get("/v1/jobs/graph-1").status_code == 200, what="the job on the gateway"
        )
        milestones = client.get("/v1/jobs/graph-1").json()["milestones"]
    assert {(need, m["id"]) for m in milestones for need in m["needs"]} == NEEDS
    depth = {m["id"]: m["depth"] for m in milestones}
    assert depth["settled"] - depth["paidOnTime"] == 1
    assert depth["settled"] - depth["escalate"] == 2

    problems: list[str] = []
    page = new_page(browser, problems)
    page.goto(f"{gateway.ui}/jobs/graph-1#token={token}")
    page.wait_for_selector('#graph [data-milestone="archived"]', timeout=30_000)
    page.wait_for_selector("#job-live:has-text('live')", timeout=30_000)

    edges: list[dict[str, Any]] = page.evaluate(MEASURE, SLACK)
    assert len(edges) == len(NEEDS)  # one edge per need, no more
    ends = set()
    for edge in edges:
        # it starts at one box and ends at one box
        [need], [milestone] = edge["from"], edge["to"]
        ends.add((need, milestone))
        assert edge["marker"] == "url(#arrow)", edge
    assert ends == NEEDS  # each edge joins a need to its milestone
    through = {(e["from"][0], e["to"][0]): e["crossed"] for e in edges if e["crossed"]}
    page.locator("#graph").screenshot(path=str(ARTIFACTS / "ui-graph-skip-levels-graph.png"))
    shot(page, "ui-graph-skip-levels.png", problems)
    assert not through, f"edges drawn through boxes (a false dependency): {through}"
