"""What a long-running process says of itself on SIGUSR1 (docs/operations.md,
"A process that seems stuck"): every task with the chain it awaits, every
thread, and an end line; and it goes on running."""

from __future__ import annotations

import asyncio
import os
import signal

import pytest

from stream.runtime.processes import DUMP_END, dump_tasks_on_signal


async def _parked(event: asyncio.Event) -> None:
    await _deeper(event)


async def _deeper(event: asyncio.Event) -> None:
    await event.wait()


async def _signalled() -> bool:
    dump_tasks_on_signal()
    event = asyncio.Event()
    parked = asyncio.create_task(_parked(event), name="parked-here")
    await asyncio.sleep(0)
    os.kill(os.getpid(), signal.SIGUSR1)
    for _ in range(100):  # the handler runs on the loop's next turn
        await asyncio.sleep(0.01)
    event.set()
    await parked
    return parked.done()


def test_sigusr1_prints_each_tasks_await_chain_and_the_process_goes_on(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert asyncio.run(_signalled())
    out = capsys.readouterr().out.splitlines()
    [line] = [x for x in out if x.startswith("task parked-here: ")]
    chain = line.split(": ", 1)[1].split(" > ")
    assert [c.rsplit(" ", 1)[1] for c in chain[:2]] == ["_parked", "_deeper"]
    assert "test_processes.py:" in chain[0]
    assert out[0].startswith("stacks: ")
    assert out[-1] == DUMP_END
    assert any(x.startswith("thread MainThread") for x in out)
