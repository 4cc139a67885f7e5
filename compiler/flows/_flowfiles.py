"""File channels (docs/flows.md, "File channels"): the shape of their value and
whether an answer is one. Pure: whether the file is really stored is the
gateway's to check (it holds the store); here, the value's shape and its media
type against the channel's ``accept``."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

from compiler.flows._flowspec import TEMPLATE, AskNode, ChannelSpec

__all__ = [
    "FILE_VALUE_KEYS",
    "accepts",
    "asks_for_file",
    "file_channel_problems",
    "file_value_problem",
    "prompt_files",
]

#: The keys of a file value, each with its type: ``{id, name, mediaType, url, bytes}``.
FILE_VALUE_KEYS: dict[str, type] = {
    "id": str,
    "name": str,
    "mediaType": str,
    "url": str,
    "bytes": int,
}
_FILE_ID = re.compile(r"[0-9a-f]{64}")
#: One media type or pattern of an ``accept`` list: ``image/png``, ``image/*``, ``*/*``.
_MEDIA_PATTERN = re.compile(r"(\*|[a-z0-9][a-z0-9!#$&^_.+-]*)/(\*|[a-z0-9][a-z0-9!#$&^_.+-]*)")


def accepts(accept: str | None, media_type: str) -> bool:
    """Whether ``media_type`` is one ``accept`` allows (``image/*, application/pdf``;
    none: any)."""
    if not accept:
        return True
    for pattern in (p.strip().lower() for p in accept.split(",")):
        if pattern in ("*", "*/*", media_type):
            return True
        if pattern.endswith("/*") and media_type.startswith(pattern[:-1]):
            return True
    return False


def file_value_problem(value: Any, accept: str | None = None) -> str | None:
    """What is wrong with ``value`` as a file channel's value (None: nothing)."""
    if not isinstance(value, dict):
        return "a file channel holds a file value {id, name, mediaType, url, bytes}"
    for key, kind in FILE_VALUE_KEYS.items():
        got = value.get(key)
        if not isinstance(got, kind) or isinstance(got, bool):
            return f"a file value needs {key!r} ({kind.__name__})"
    if _FILE_ID.fullmatch(value["id"]) is None:
        return "a file value's id is the SHA-256 of its bytes (64 hex digits)"
    if value["url"] != f"/v1/files/{value['id']}":
        return "a file value's url is /v1/files/{id}"
    if not accepts(accept, value["mediaType"].lower()):
        return f"this file channel accepts {accept}, not {value['mediaType']}"
    return None


def asks_for_file(node: AskNode, channels: Mapping[str, ChannelSpec]) -> ChannelSpec | None:
    """The file channel an ask writes its answer to (None: the answer is text)."""
    channel = channels.get(node.output)
    return channel if channel is not None and channel.type == "file" else None


def prompt_files(
    prompt: str, channels: Mapping[str, ChannelSpec], read: Callable[[str], Any]
) -> tuple[dict[str, Any], ...]:
    """The file values an llm node's prompt names (``{{photo}}`` of a file
    channel holding one), in order, each once: what the model is given as input
    beside the text (docs/flows.md, "A model reads a file")."""
    found: list[dict[str, Any]] = []
    for match in TEMPLATE.finditer(prompt):
        name, path = match.group(1), match.group(2)
        channel = channels.get(name)
        if path or channel is None or channel.type != "file":
            continue
        value = read(name)
        if file_value_problem(value) is None and value not in found:
            found.append(dict(value))
    return tuple(found)


def file_channel_problems(name: str, channel: ChannelSpec) -> list[tuple[str, str]]:
    """What is wrong with channel ``name`` as to files (rule ``FILE_CHANNEL``,
    docs/flows.md "File channels"), each as (the field, a message): ``accept``
    on a channel that is not a file channel or not a media type list; a file
    channel with a reducer, or a default that is not a file value."""
    problems: list[tuple[str, str]] = []
    if channel.accept is not None:
        if channel.type != "file":
            problems.append(
                ("accept", f"{name}: accept is for a file channel, not a {channel.type}")
            )
        else:
            for pattern in (p.strip().lower() for p in channel.accept.split(",")):
                if _MEDIA_PATTERN.fullmatch(pattern) is None:
                    problems.append(
                        ("accept", f"{name}: {pattern!r} is not a media type (image/png, image/*)")
                    )
    if channel.type == "file":
        if channel.reducer is not None:
            problems.append(("reducer", f"{name}: a file channel holds one file: no reducer"))
        if channel.default is not None and file_value_problem(channel.default) is not None:
            problems.append(("default", f"{name}: a file channel's default is a file value"))
    return problems
