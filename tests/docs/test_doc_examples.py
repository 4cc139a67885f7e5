"""Every fenced YAML example in README.md and docs/*.md runs, so the documentation
cannot rot: a playbook through `lemongraph check`, a scenario through
`lemongraph simulate`, a flow through `lemongraph flow check` (no broker; the
click command the console script runs, in the test's process: tests/inprocess.py).

How a page marks its examples (the fence's info string, after `yaml`):

- `file=NAME`: the block is written to NAME in a folder of its own per page, so a
  scenario names its playbook by that name (`playbook: NAME`). Files ending in
  `.scenario.yaml` are scenarios; the others are playbooks.
- `invalid`: the block shows a mistake. The fenced `text` block right after it holds
  exactly what `lemongraph check NAME` prints (and it must exit 1).
- `fails` (a scenario): it misses its expectation on purpose. The `text` block right
  after it holds exactly what `lemongraph simulate` prints for it (exit 1).
- `flow`: the block is a flow (docs/flows.md), written to `flows/NAME` in the page's
  folder (where a playbook's `flow: NAME` finds it) and checked with
  `lemongraph flow check flows/NAME`: it must print `ok: 1 flow(s) valid`. With
  `invalid`, the `text` block after it holds exactly what `flow check` prints (exit 1);
  with `warns`, exactly what it prints for a valid flow with warnings (exit 0).
- `norun`: not a playbook or a scenario (an agent catalog, a script for the stand-in
  model); nothing runs it. A YAML block with none of these marks fails the test.

A fenced ```` ```text cmd ```` block is a terminal session of commands that need no
broker (`lemongraph schedule next ...`, docs/schedules.md): each line starting with
`$ lemongraph ` is run (split like a shell would, in an empty folder), and the lines
after it, up to the next `$`, are exactly what it prints (stdout, then stderr). A
command whose shown output has a line starting with `error: ` must exit non-zero;
any other must exit 0.
"""

from __future__ import annotations

import itertools
import json
import re
import shlex
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.stream.cli.test_cli_simulate_check import run

ROOT = Path(__file__).resolve().parents[2]
PAGES = sorted([ROOT / "README.md", *(ROOT / "docs").glob("*.md")])

_FENCE = re.compile(r"^(?P<indent> {0,3})(?P<fence>`{3,}|~{3,})(?P<info>.*)$")


@dataclass
class Block:
    """One fenced block of a page."""

    page: Path
    line: int  # 1-based line of the opening fence
    lang: str
    marks: set[str] = field(default_factory=set)
    name: str | None = None
    text: str = ""
    expected: str | None = None  # the `text` block after an `invalid`/`fails`/`warns` one

    @property
    def where(self) -> str:
        page = self.page.relative_to(ROOT) if self.page.is_relative_to(ROOT) else self.page
        return f"{page}:{self.line}"

    @property
    def is_flow(self) -> bool:
        return "flow" in self.marks

    @property
    def is_scenario(self) -> bool:
        return self.name is not None and ".scenario." in self.name


def fenced_blocks(page: Path) -> list[Block]:
    """The fenced blocks of a Markdown page, in order."""
    blocks: list[Block] = []
    lines = page.read_text(encoding="utf-8").splitlines()
    i = 0
    while i < len(lines):
        match = _FENCE.match(lines[i])
        if match is None:
            i += 1
            continue
        fence, info = match.group("fence"), match.group("info").strip()
        words = info.split()
        block = Block(page, i + 1, words[0].lower() if words else "")
        for word in words[1:]:
            if word.startswith("file="):
                block.name = word.removeprefix("file=")
            else:
                block.marks.add(word)
        body: list[str] = []
        i += 1
        while i < len(lines) and not lines[i].strip().startswith(fence[0] * len(fence)):
            body.append(lines[i])
            i += 1
        block.text = "\n".join(body) + "\n"
        blocks.append(block)
        i += 1
    for before, after in itertools.pairwise(blocks):
        if {"invalid", "fails", "warns"} & before.marks and after.lang == "text":
            before.expected = after.text
    return blocks


def yaml_blocks(page: Path) -> list[Block]:
    return [b for b in fenced_blocks(page) if b.lang in ("yaml", "yml")]


def write_page(page: Path, folder: Path) -> list[Block]:
    """Write every named block of ``page`` into ``folder``; the named blocks."""
    named = [b for b in yaml_blocks(page) if b.name is not None]
    names = [b.name for b in named]
    duplicates = sorted({n for n in names if names.count(n) > 1 and n is not None})
    assert not duplicates, f"{page.name}: two examples are named {duplicates}"
    for block in named:
        assert block.name is not None
        assert "/" not in block.name, f"{block.where}: file= takes a plain file name"
        target = folder / "flows" / block.name if block.is_flow else folder / block.name
        target.parent.mkdir(exist_ok=True)
        target.write_text(block.text, encoding="utf-8")
    return named


def _id(page: Path) -> str:
    return str(page.relative_to(ROOT))


def test_the_pages_have_examples() -> None:
    """The parser sees the examples the pages hold (or this test proves nothing)."""
    counted = {p.name: len([b for b in yaml_blocks(p) if b.name]) for p in PAGES}
    for page in ("playbooks.md", "conditions.md", "scenarios.md"):
        assert counted.get(page, 0) >= 2, counted
    assert sum(counted.values()) >= 16, counted


@pytest.mark.parametrize("page", PAGES, ids=_id)
def test_every_yaml_block_is_marked(page: Path) -> None:
    for block in yaml_blocks(page):
        assert block.name is not None or "norun" in block.marks, (
            f"{block.where}: a YAML example needs file=NAME (it is run) or norun"
        )
        if {"invalid", "fails", "warns"} & block.marks:
            assert block.expected is not None, (
                f"{block.where}: an example marked {sorted(block.marks)} must be followed "
                "by a ```text block with what the command prints"
            )


def _checked(b: Block) -> bool:
    return not {"invalid", "norun"} & b.marks and not b.is_flow


def _simulated(b: Block) -> bool:
    return b.is_scenario and not {"invalid", "fails", "norun"} & b.marks


def _flow_checked(b: Block) -> bool:
    return b.is_flow and not {"invalid", "warns", "norun"} & b.marks


def _pages_with(kind: Callable[[Block], bool]) -> list[Path]:
    """The pages with at least one named example of ``kind`` (each test runs on
    those pages only, rather than skipping the others)."""
    return [p for p in PAGES if any(b.name is not None and kind(b) for b in yaml_blocks(p))]


@pytest.mark.parametrize("page", _pages_with(_checked), ids=_id)
def test_valid_examples_pass_check(page: Path, tmp_path: Path) -> None:
    valid = [b for b in write_page(page, tmp_path) if _checked(b)]
    result = run("check", *(str(b.name) for b in valid), cwd=tmp_path)
    assert result.returncode == 0, f"{page.name}:\n{result.stdout}{result.stderr}"
    assert result.stdout.strip() == f"ok: {len(valid)} file(s) valid"


@pytest.mark.parametrize("page", _pages_with(_simulated), ids=_id)
def test_scenario_examples_pass_simulate(page: Path, tmp_path: Path) -> None:
    scenarios = [b for b in write_page(page, tmp_path) if _simulated(b)]
    for block in scenarios:
        assert block.name is not None
        result = run("simulate", "--dir", ".", "--json", block.name, cwd=tmp_path)
        assert result.returncode == 0, f"{block.where}:\n{result.stdout}{result.stderr}"
        report = json.loads(result.stdout)
        # Counted with PyYAML, not with the code under test.
        wanted = [s["name"] for s in yaml.safe_load(block.text)["scenarios"]]
        ran = [r["scenario"] for r in report["results"] if r["file"] == block.name]
        assert ran == wanted, f"{block.where}: ran {ran}, the block has {wanted}"
        assert all(r["passed"] for r in report["results"]), report


@pytest.mark.parametrize("page", _pages_with(_flow_checked), ids=_id)
def test_flow_examples_pass_flow_check(page: Path, tmp_path: Path) -> None:
    flows = [b for b in write_page(page, tmp_path) if _flow_checked(b)]
    for block in flows:
        result = run("flow", "check", f"flows/{block.name}", cwd=tmp_path)
        assert result.returncode == 0, f"{block.where}:\n{result.stdout}{result.stderr}"
        assert result.stdout == "ok: 1 flow(s) valid\n", f"{block.where}:\n{result.stdout}"


def _marked() -> list[Any]:
    return [
        pytest.param(b, id=f"{_id(b.page)}:{b.name}")
        for page in PAGES
        for b in yaml_blocks(page)
        if {"invalid", "fails", "warns"} & b.marks
    ]


@pytest.mark.parametrize("block", _marked())
def test_marked_examples_print_what_the_page_shows(block: Block, tmp_path: Path) -> None:
    """An `invalid` playbook through check, a `fails` scenario through simulate,
    an `invalid` flow through flow check: exit 1; a `warns` flow: exit 0; and
    exactly the text the page shows after it."""
    write_page(block.page, tmp_path)
    assert block.name is not None
    assert block.expected is not None
    if block.is_flow:
        command = ["flow", "check", f"flows/{block.name}"]
    elif "invalid" in block.marks:
        command = ["check", block.name]
    else:
        command = ["simulate", "--dir", ".", block.name]
    result = run(*command, cwd=tmp_path)
    exit_code = 0 if "warns" in block.marks else 1
    assert result.returncode == exit_code, (
        f"{block.where}: {' '.join(command)} exited {result.returncode}"
    )
    assert result.stdout == block.expected, (
        f"{block.where}: the page shows\n{block.expected}\nbut {command[0]} prints\n{result.stdout}"
    )


def test_a_rotten_example_fails(tmp_path: Path) -> None:
    """The machinery above catches an example that no longer holds."""
    page = tmp_path / "page.md"
    page.write_text(
        "```yaml file=p.yaml invalid\nkey: p\nversion: 1\nmilestones:\n"
        "  - {id: a, condition: x WITHIN 200d}\n```\n\n```text\np.yaml:1:1: wrong\n```\n",
        encoding="utf-8",
    )
    (block,) = yaml_blocks(page)
    assert block.name == "p.yaml"
    assert block.marks == {"invalid"}
    assert block.expected == "p.yaml:1:1: wrong\n"
    folder = tmp_path / "out"
    folder.mkdir()
    with pytest.raises(AssertionError, match="longer than the maximum of 180d"):
        test_marked_examples_print_what_the_page_shows(block, folder)


# -- links ---------------------------------------------------------------------------

_LINK = re.compile(r"\]\((?P<target>[^)\s]+)\)")


def _slugs(page: Path) -> set[str]:
    """The anchors GitHub gives a page's headings (outside fenced blocks)."""
    slugs: set[str] = set()
    seen: dict[str, int] = {}
    fenced = False
    for line in page.read_text(encoding="utf-8").splitlines():
        if _FENCE.match(line):
            fenced = not fenced
            continue
        if fenced or not line.startswith("#"):
            continue
        text = line.lstrip("#").strip().lower()
        slug = re.sub(r"[^\w\- ]", "", text).replace(" ", "-")
        count = seen.get(slug, 0)
        seen[slug] = count + 1
        slugs.add(slug if count == 0 else f"{slug}-{count}")
    return slugs


@pytest.mark.parametrize("page", PAGES, ids=_id)
def test_every_relative_link_resolves(page: Path) -> None:
    """A link to a file of the repository, and to a heading in it, still lands."""
    text = page.read_text(encoding="utf-8")
    broken = []
    for match in _LINK.finditer(text):
        target = match.group("target")
        if target.startswith(("http://", "https://", "mailto:")):
            continue
        path, _, anchor = target.partition("#")
        file = (page.parent / path).resolve() if path else page
        if not file.exists():
            broken.append(f"{target}: no such file")
        elif anchor and file.suffix == ".md" and anchor not in _slugs(file):
            broken.append(f"{target}: no heading #{anchor} in {file.name}")
    assert not broken, f"{page.name}: " + "; ".join(broken)


def test_the_link_check_sees_a_broken_anchor(tmp_path: Path) -> None:
    page = tmp_path / "a.md"
    page.write_text("# Title\n\n## Two `words`: here\n", encoding="utf-8")
    assert _slugs(page) == {"title", "two-words-here"}
    page.write_text(page.read_text(encoding="utf-8") + "[ok](#two-words-here) [gone](a.md#three)\n")
    with pytest.raises(AssertionError, match=r"no heading #three in a\.md"):
        test_every_relative_link_resolves(page)


# -- terminal sessions (```text cmd) ----------------------------------------------------


@dataclass(frozen=True)
class Command:
    """One ``$ lemongraph ...`` line of a ``cmd`` block and what it prints."""

    where: str
    args: tuple[str, ...]
    expected: str


def commands(page: Path) -> list[Command]:
    out: list[Command] = []
    for block in fenced_blocks(page):
        if block.lang != "text" or "cmd" not in block.marks:
            continue
        lines = block.text.splitlines() or [""]
        assert lines[0].startswith("$ lemongraph "), (
            f"{block.where}: a cmd block starts with a `$ lemongraph ...` line"
        )
        starts = [i for i, line in enumerate(lines) if line.startswith("$ ")]
        for i, start in enumerate(starts):
            end = starts[i + 1] if i + 1 < len(starts) else len(lines)
            words = shlex.split(lines[start][2:])
            assert words[0] == "lemongraph", f"{block.where}: only lemongraph commands run"
            shown = "".join(f"{line}\n" for line in lines[start + 1 : end])
            out.append(Command(f"{block.where}+{start}", tuple(words[1:]), shown))
    return out


def _commands() -> list[Any]:
    return [
        pytest.param(c, id=f"{_id(page)}:{' '.join(c.args)[:60]}")
        for page in PAGES
        for c in commands(page)
    ]


@pytest.mark.parametrize("command", _commands())
def test_commands_print_what_the_page_shows(command: Command, tmp_path: Path) -> None:
    result = run(*command.args, cwd=tmp_path)
    printed = result.stdout + result.stderr
    fails = any(line.startswith("error: ") for line in command.expected.splitlines())
    assert (result.returncode != 0) == fails, (
        f"{command.where}: {' '.join(command.args)} exited {result.returncode}\n{printed}"
    )
    assert printed == command.expected, (
        f"{command.where}: the page shows\n{command.expected}\nbut the command prints\n{printed}"
    )


def test_the_schedules_page_has_commands() -> None:
    assert len(commands(ROOT / "docs" / "schedules.md")) >= 4


def test_a_rotten_command_fails(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text(
        '```text cmd\n$ lemongraph schedule next "30 2 * * *" --from 2026-03-07T00:00:00Z '
        "--count 1\n2026-03-07T02:31:00Z  2026-03-07 02:31 UTC (UTC)\n```\n",
        encoding="utf-8",
    )
    (command,) = commands(page)
    assert command.args[:2] == ("schedule", "next")
    with pytest.raises(AssertionError, match="the page shows"):
        test_commands_print_what_the_page_shows(command, tmp_path)
