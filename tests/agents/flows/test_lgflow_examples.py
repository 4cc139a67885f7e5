"""LGFlow's worked examples in this language (docs/flows.md, "Coming from
LGFlow"): the structured classifier, the parallel review and the MCP order desk,
each copied with its stand-in script and the bundled catalog into the test's
own folder, passing ``flow check`` and running under ``flow run`` (the stand-in
model; the order desk's tools on the demo MCP server, over stdio)."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.stream.cli.test_cli_flow_run import flow_run
from tests.stream.cli.test_cli_simulate_check import PLAYBOOKS

NAMES = ("structured-classifier", "parallel-review", "mcp-order-desk")


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A playbooks folder of its own: the three flows, their scripts, and the
    bundled catalog with the order desk's server started by its command."""
    root = tmp_path_factory.mktemp("lgflow")
    (root / "flows").mkdir()
    for name in NAMES:
        for suffix in (".yaml", ".standin.yaml"):
            shutil.copy(PLAYBOOKS / "flows" / f"{name}{suffix}", root / "flows")
    shutil.copytree(PLAYBOOKS / "skills", root / "skills")
    catalog = (PLAYBOOKS / "catalog.yaml").read_text(encoding="utf-8")
    served = '  orders: {url: "${ORDERS_MCP_URL}"}\n'
    assert served in catalog
    command = json.dumps([sys.executable, "-m", "agents.dev.demo_mcp", "orders"])
    catalog = catalog.replace(served, f"  orders: {{command: {command}}}\n")
    (root / "catalog.yaml").write_text(catalog, encoding="utf-8")
    return root


def _run(folder: Path, name: str, *args: str) -> dict[str, Any]:
    proc = flow_run(
        "run",
        f"flows/{name}.yaml",
        "--script",
        f"flows/{name}.standin.yaml",
        *args,
        "--json",
        cwd=folder,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    end: dict[str, Any] = json.loads(proc.stdout.splitlines()[-1])
    assert end["kind"] == "end"
    return end


def test_each_example_passes_flow_check_with_no_warning(folder: Path) -> None:
    proc = flow_run("check", *(f"flows/{n}.yaml" for n in NAMES), cwd=folder)
    assert proc.returncode == 0, proc.stdout
    assert proc.stdout == "ok: 3 flow(s) valid\n"


def test_the_structured_classifier_routes_on_the_answers_shape(folder: Path) -> None:
    end = _run(folder, "structured-classifier", "--input", "question=Why a second charge?")
    assert end["trail"] == ["classify", "billing"]
    assert end["outputs"]["classification"]["category"] == "billing"
    # An answer of the wrong shape is never written: asked again, then onError.
    bad = _run(folder, "structured-classifier", "--input", "question=wrong shape, please")
    assert bad["trail"] == ["handoff"]
    assert bad["outputs"] == {
        "classification": None,
        "answer": "Thank you: a person will answer you today.",
    }


def test_the_parallel_review_grades_each_document_and_sums_up_once(folder: Path) -> None:
    documents = json.dumps(["A guide with a worked example.", "A guide for nobody."])
    end = _run(
        folder,
        "parallel-review",
        "--input",
        "subject=the setup guide",
        "--input",
        f"documents={documents}",
    )
    assert end["trail"] == ["gather", "spread", "grade", "grade", "summarize"]
    assert sorted(end["outputs"]["grades"]) == [
        "2: it says nothing of who it is for.",
        "4: it has a worked example.",
    ]
    empty = _run(folder, "parallel-review", "--input", "subject=x", "--input", "documents=[]")
    assert empty["trail"] == ["gather", "summarize"]
    assert empty["outputs"]["summary"] == "There was nothing to review."


def test_the_mcp_order_desk_places_the_approved_order_on_the_demo_server(folder: Path) -> None:
    end = _run(
        folder,
        "mcp-order-desk",
        "--input",
        "email=ada@example.com",
        "--input",
        "request=Three more notebooks, please",
        "--answer",
        "confirm=yes",
    )
    assert end["trail"] == ["find", "orders", "decide", "confirm", "place", "tell"]
    placed = end["outputs"]["placed"]
    # What the MCP server answered, not what the model said.
    assert (placed["customer_id"], placed["item"], placed["quantity"]) == ("C-1", "notebook", 3)
    assert placed["status"] == "placed"
    assert placed["id"].startswith("O-")
