"""A flow's values as a person reads them (docs/flows.md, "What a person reads").

What an approval shows, a value a question's template reads and a flow's reply
reach a person in chat and in mail: never as JSON. An object is ``Label:
value`` lines, a nested one indented under its label; a list is ``- `` bullet
lines; a channel's label is its ``description``, else its name in words.

Every string is cleaned of control, bidi and zero-width characters, and a
value's line breaks are spaces, so that a value cannot write a line of its own
(a ``"\\nAmount: 0"`` in a note is not a field). Everything is bounded: a
string's opening, the items and fields shown (the rest are counted), the depth
shown, and the whole text. Pure: values in, text out.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterator, Mapping
from typing import Any

from topics import ShownField

__all__ = [
    "fields_text",
    "label_of",
    "readable",
    "readable_inline",
    "shown_fields",
]

#: The opening of a string value kept (characters).
VALUE_CHARS = 300
#: The opening of a label kept (characters).
LABEL_CHARS = 80
#: The items of a list, and the fields of an object, shown; the rest are counted.
ITEMS = 20
#: The levels of nesting shown; deeper ones are ``…``.
DEPTH = 4
#: The most one value's text, and one block of fields, may be (characters).
TEXT_CHARS = 4000
#: What a template puts in a question at the most (characters).
INLINE_CHARS = 300

_INDENT = "  "
_WORD_BREAK = re.compile(r"[_\-\s]+|(?<=[a-z0-9])(?=[A-Z])")
_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_\-]*$")
#: Control characters that separate text: a space in their place.
_SEPARATORS = "\t\n\r\v\f\x1c\x1d\x1e\x1f\x85\u2028\u2029"


def _clean(text: str, *, lines: bool = False) -> str:
    """``text`` without control and format characters (bidi controls,
    zero-width ones, the byte-order mark); its whitespace one space, or with
    ``lines`` its line breaks kept (each line's trailing spaces dropped)."""
    text = text.replace("\r\n", "\n")
    out: list[str] = []
    for ch in text:
        if ch == "\n" and lines:
            out.append(ch)
        elif ch in _SEPARATORS:
            out.append(" ")
        elif unicodedata.category(ch) not in ("Cc", "Cf", "Cs", "Co", "Cn"):
            out.append(ch)
    cleaned = "".join(out)
    if not lines:
        return " ".join(cleaned.split())
    rows = [row.rstrip() for row in cleaned.split("\n")]
    return re.sub(r"\n{3,}", "\n\n", "\n".join(rows)).strip("\n")


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


def _words(name: str) -> str:
    """A key in words: ``order_id`` → ``order ID``, ``createdAt`` → ``created at``."""
    if not _NAME.match(name):
        return _clean(name)
    words = [w for w in _WORD_BREAK.split(name) if w]
    return " ".join("ID" if w.lower() == "id" else w.lower() for w in words)


def _capital(text: str) -> str:
    return text[:1].upper() + text[1:]


def label_of(name: str, description: str = "") -> str:
    """A channel's label: its description (without a closing full stop), else
    its name in words (``order_id`` → ``Order ID``)."""
    said = _clean(description).rstrip(".").rstrip()
    return _cut(said or _capital(_words(name)) or "(unnamed)", LABEL_CHARS)


def _leaf(value: Any) -> str:
    """A value that is not a non-empty object or list, as text."""
    if value is None or isinstance(value, Mapping | list | tuple):
        return "none"  # nothing, or an empty object or list
    if value is True or value is False:
        return "yes" if value else "no"
    if isinstance(value, float) and value.is_integer() and abs(value) < 1e15:
        return str(int(value))
    if isinstance(value, int | float):
        return str(value)
    return _cut(_clean(str(value)), VALUE_CHARS) or "(empty)"


def _container(value: Any) -> bool:
    return isinstance(value, Mapping | list | tuple) and len(value) > 0


def _more(shown: int, total: int) -> Iterator[str]:
    if total > shown:
        yield f"… and {total - shown} more"


def _field(label: str, value: Any, depth: int) -> Iterator[str]:
    """``Label: value``, or ``Label:`` and the value's lines indented under it."""
    if not _container(value):
        yield f"{label}: {_leaf(value)}"
    elif depth > DEPTH:
        yield f"{label}: …"
    else:
        yield f"{label}:"
        yield from (_INDENT + line for line in _block(value, depth + 1))


def _block(value: Any, depth: int) -> Iterator[str]:
    """The lines of an object (``Label: value``) or a list (``- item``)."""
    if isinstance(value, Mapping):
        items = list(value.items())
        for key, item in items[:ITEMS]:
            yield from _field(_capital(_words(str(key))) or "(unnamed)", item, depth)
        yield from _more(min(len(items), ITEMS), len(items))
        return
    for item in value[:ITEMS]:
        if not _container(item):
            yield "- " + _leaf(item)
        elif depth > DEPTH:
            yield "- …"
        else:
            first, *rest = _block(item, depth + 1)
            yield "- " + first
            yield from (_INDENT + line for line in rest)
    yield from _more(min(len(value), ITEMS), len(value))


def _bounded(lines: list[str], limit: int = TEXT_CHARS) -> str:
    """The lines joined, as many whole lines as ``limit`` holds, the rest counted."""
    kept: list[str] = []
    size = 0
    for i, line in enumerate(lines):
        size += len(line) + 1
        if size > limit:
            kept.append(f"… ({len(lines) - i} more lines)")
            break
        kept.append(line)
    return "\n".join(kept)


def _text(value: Any) -> str:
    return _bounded(list(_block(value, 1))) if _container(value) else _leaf(value)


def shown_fields(
    show: Mapping[str, Any], descriptions: Mapping[str, str] | None = None
) -> list[ShownField]:
    """The channels an approval shows, in order, each with its label (from
    ``descriptions``, by channel) and its value as text."""
    said = descriptions or {}
    return [
        ShownField(
            channel=channel,
            label=label_of(channel, said.get(channel, "")),
            text=_text(value),
            block=_container(value),
        )
        for channel, value in show.items()
    ]


def fields_text(fields: list[ShownField]) -> str:
    """The fields as one text: ``Label: value`` lines, a block's lines indented
    under its label."""
    lines: list[str] = []
    for f in fields:
        if f.block:
            lines.append(f"{f.label}:")
            lines.extend(_INDENT + line for line in f.text.split("\n"))
        else:
            lines.append(f"{f.label}: {f.text}")
    return _bounded(lines)


def readable(value: Any, label: str = "") -> str:
    """A value for a person on its own (a flow's reply): a string as written
    (its lines kept, cleaned, bounded); anything else as lines, under
    ``label`` (a channel's description) when one is given."""
    if isinstance(value, str):
        return _cut(_clean(value, lines=True), TEXT_CHARS)
    if not label:
        return _text(value)
    return fields_text(shown_fields({"": value}, {"": label}))


def readable_inline(value: Any) -> str:
    """A value inside a sentence (a question's ``{{template}}``): a string as
    it stands (cleaned), an object as ``key: value, …`` (a nested one in
    parentheses), a list as ``a, b``; bounded."""
    return _cut(_inline(value, 1), INLINE_CHARS)


def _inline(value: Any, depth: int) -> str:
    if isinstance(value, str):
        return _clean(value)
    if not _container(value):
        return _leaf(value)
    if depth > DEPTH:
        return "…"
    if isinstance(value, Mapping):
        items: list[Any] = list(value.items())
        parts = [f"{_words(str(k))}: {_inline(v, depth + 1)}" for k, v in items[:ITEMS]]
    else:
        items = list(value)
        parts = [_inline(v, depth + 1) for v in items[:ITEMS]]
    parts.extend(_more(min(len(items), ITEMS), len(items)))
    text = ", ".join(parts)
    return f"({text})" if depth > 1 else text
