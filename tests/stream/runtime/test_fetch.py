"""stream/runtime/fetch.py: a batch's messages are acknowledged (and so may be
committed) only after the handler has handled all of them; a failed batch
stops the process with none acknowledged.

The consumer's fetch loop runs in every broker test (tests/stream); these pin
the delivery step on its own, with a stand-in for the consumer."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from types import SimpleNamespace
from typing import Any

import pytest

from stream.runtime.fetch import BatchConsumer


class Exited(Exception):
    pass


def consumer(handler: Any) -> tuple[Any, list[int]]:
    acked: list[int] = []
    return SimpleNamespace(batch_handler=handler, ack=lambda m: acked.append(m)), acked


def test_messages_are_acknowledged_in_order_after_the_handler_returns() -> None:
    seen: list[list[int]] = []
    acked_when_handled: list[int] = []

    async def handler(messages: Sequence[Any]) -> None:
        seen.append(list(messages))
        acked_when_handled.extend(acked)

    stand_in, acked = consumer(handler)
    asyncio.run(BatchConsumer._deliver(stand_in, [3, 4, 5]))
    assert seen == [[3, 4, 5]]
    assert acked_when_handled == []  # nothing acknowledged while handling
    assert acked == [3, 4, 5]


def test_a_failed_batch_exits_with_70_and_acknowledges_nothing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    codes: list[int] = []

    def exit_(code: int) -> None:
        codes.append(code)
        raise Exited

    monkeypatch.setattr("stream.runtime.fetch.os._exit", exit_)

    async def handler(messages: Sequence[Any]) -> None:
        raise RuntimeError("the broker refused a batch")

    stand_in, acked = consumer(handler)
    with pytest.raises(Exited):
        asyncio.run(BatchConsumer._deliver(stand_in, [1, 2]))
    assert codes == [70]
    assert acked == []
