"""What a model's reply writes to its llm node's channel (docs/flows.md, "What a
step does"): trimmed text for a string channel with no schema; otherwise JSON
(inside a ```` ```json ```` fence when it is wrapped in one), checked against the
node's schema, or against the channel's type. Pure."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from compiler.flows._flowschema import check_schema, value_kind
from compiler.flows._flowspec import ChannelSpec, LlmNode

__all__ = ["reply_value"]

_FENCE = re.compile(r"^```[A-Za-z0-9_-]*\s*\n(.*?)\n?```$", re.DOTALL)


def reply_value(
    node: LlmNode, channels: Mapping[str, ChannelSpec], text: str
) -> tuple[Any, str | None]:
    """The value the reply ``text`` writes to ``node``'s output, or the reason
    the node fails (``(None, reason)``)."""
    text = text.strip()
    channel = channels.get(node.output)
    if node.schema_ is None and (channel is None or channel.type == "string"):
        return text, None
    fenced = _FENCE.match(text)
    try:
        value = json.loads(fenced.group(1) if fenced else text)
    except ValueError:
        if node.schema_ is None and channel is not None and channel.reducer == "append":
            return text, None
        return None, f"{node.output}: the answer is not JSON"
    if node.schema_ is not None:
        problems = check_schema(value, node.schema_, node.output)
        if problems:
            return None, "; ".join(problems)
    elif (
        channel is not None
        and channel.reducer is None
        and channel.type != "file"
        and check_schema(value, {"type": channel.type})
    ):
        kind = value_kind(value)
        return None, f"{node.output} is a {channel.type} channel, and the answer is {kind}"
    return value, None
