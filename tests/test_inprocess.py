"""tests/inprocess.py: a `lemongraph` command run in the test's process leaves the
process as it found it (environment, working folder, logging, sys.path and the
modules imported from the command's folder), and gives what a process gives."""

from __future__ import annotations

import logging
import os
import sys
from pathlib import Path

from tests.inprocess import invoke

#: A handlers module (LEMONGRAPH_HANDLERS, docs/flows.md) that changes the
#: process when the command imports it.
MEDDLING = """\
import logging
import os

os.environ["LEMONGRAPH_TEST_LEAK"] = "1"
logging.getLogger().addHandler(logging.NullHandler())
logging.getLogger().setLevel(logging.DEBUG)
"""

FLOW = (
    'version: "1"\noutputs: [choice]\nstate:\n  choice: {type: string}\nstart: ask\n'
    "nodes:\n  - {id: ask, type: ask, ask: 'Red or blue?', answers: [red, blue],"
    " output: choice}\n"
    "edges:\n  - {from: ask, to: END}\n"
)


def test_a_command_leaves_the_process_as_it_found_it(tmp_path: Path) -> None:
    (tmp_path / "meddling_handlers.py").write_text(MEDDLING, encoding="utf-8")
    (tmp_path / "f.yaml").write_text(FLOW, encoding="utf-8")
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    aiokafka = logging.getLogger("aiokafka").level
    cwd, path = os.getcwd(), list(sys.path)
    env = {**os.environ, "LEMONGRAPH_HANDLERS": "meddling_handlers"}
    done = invoke(["flow", "check", "f.yaml"], env=env, cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout == "ok: 1 flow(s) valid\n"
    assert "LEMONGRAPH_TEST_LEAK" not in os.environ
    assert "LEMONGRAPH_HANDLERS" not in os.environ
    assert (list(root.handlers), root.level) == (handlers, level)
    assert logging.getLogger("aiokafka").level == aiokafka
    assert (os.getcwd(), sys.path) == (cwd, path)
    assert "meddling_handlers" not in sys.modules
