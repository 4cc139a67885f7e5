"""The house's size rules (issue 30; README, "How it works"): no module over 800
lines, no function over 150, no folder with more than 15 modules side by side. A
file that grows past one is split by responsibility before it is added to."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("topics", "compiler", "stream", "agents")
MODULE_LINES = 800
FUNCTION_LINES = 150
MODULES_PER_FOLDER = 15


def sources(suffix: str) -> list[Path]:
    return sorted(
        p for package in PACKAGES for p in (ROOT / package).rglob(f"*{suffix}")
        if "__pycache__" not in p.parts
    )  # fmt: skip


def test_no_module_is_over_800_lines() -> None:
    long = {
        str(p.relative_to(ROOT)): n
        for p in sources(".py") + sources(".js")
        if (n := len(p.read_text(encoding="utf-8").splitlines())) > MODULE_LINES
    }
    assert long == {}


def test_no_function_is_over_150_lines() -> None:
    long = {}
    for path in sources(".py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                lines = (node.end_lineno or node.lineno) - node.lineno + 1
                if lines > FUNCTION_LINES:
                    long[f"{path.relative_to(ROOT)}:{node.lineno} {node.name}"] = lines
    assert long == {}


def test_no_folder_holds_more_than_15_modules() -> None:
    folders = {p.parent for p in sources(".py")}
    crowded = {
        str(folder.relative_to(ROOT)): n
        for folder in folders
        if (n := len([p for p in folder.glob("*.py") if p.name != "__init__.py"]))
        > MODULES_PER_FOLDER
    }
    assert crowded == {}


def test_the_rules_see_the_files_they_rule() -> None:
    # A walk that found nothing would pass the three tests above.
    assert len(sources(".py")) > 200
    assert (ROOT / "stream/gateway/ui/app.js") in sources(".js")
