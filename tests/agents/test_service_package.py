"""The agents service is a package of one module per responsibility
(agents/service/__init__.py): its public names stay where they were, and its
modules import one another down one chain only, state < runs < partitions |
intake, never back up and never from inside a function."""

from __future__ import annotations

import ast
from pathlib import Path

import agents.service
from agents.service import AgentService
from agents.service.intake import Intake
from agents.service.partitions import Partitions
from agents.service.runs import Runs
from agents.service.state import ServiceState

FOLDER = Path(agents.service.__file__).parent

#: Per module of the package, the siblings it may import.
MAY_IMPORT = {
    "state": set(),
    "runs": {"state"},
    "partitions": {"runs", "state"},
    "intake": {"runs", "state"},
    "__init__": {"intake", "partitions", "state"},
}


def test_public_names_stay_at_agents_service() -> None:
    assert sorted(agents.service.__all__) == ["AgentService", "AgentStats", "Where", "data_path"]
    assert AgentService.__module__ == "agents.service"
    assert AgentService.__mro__[1:] == (Intake, Partitions, Runs, ServiceState, object)


def test_modules_import_down_the_chain_only() -> None:
    assert {p.stem for p in FOLDER.glob("*.py")} == set(MAY_IMPORT)
    for name, allowed in MAY_IMPORT.items():
        tree = ast.parse((FOLDER / f"{name}.py").read_text())
        siblings = {
            node.module.removeprefix("agents.service.")
            for node in ast.walk(tree)
            if isinstance(node, ast.ImportFrom)
            and node.module is not None
            and node.module.startswith("agents.service.")
        }
        assert siblings <= allowed, (name, siblings - allowed)
        for func in ast.walk(tree):
            if isinstance(func, ast.FunctionDef | ast.AsyncFunctionDef):
                inner = [n for n in ast.walk(func) if isinstance(n, ast.ImportFrom)]
                assert all(not (n.module or "").startswith("agents.service") for n in inner), (
                    name,
                    func.name,
                )
