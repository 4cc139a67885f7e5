"""The rule every job key obeys, on the inbox and at the gateway alike.

A job key names a job in URLs (``/v1/jobs/<key>``), in the UI, in logs and in
the store, so it must be readable back and must not pass for another key:

* 1 to :data:`MAX_KEY_LENGTH` characters;
* every character printable (``str.isprintable``: letters, marks, numbers,
  punctuation, symbols and the ASCII space), so no control character (Unicode
  category Cc, e.g. NUL, tab, newline, DEL), no format character (Cf: the bidi
  overrides and isolates, zero-width spaces and joiners, the byte-order mark,
  the soft hyphen), no surrogate (Cs), private-use (Co) or unassigned (Cn)
  code point, and no space other than the ASCII one (no line or paragraph
  separator, no no-break space);
* no ``/`` (a key is one path segment of the API), and not ``.`` or ``..``
  (clients rewrite those segments);
* no leading or trailing space;
* no default-ignorable code point (Unicode's Default_Ignorable_Code_Point:
  variation selectors, the combining grapheme joiner, Hangul fillers and the
  like, which render as nothing) and no braille blank (U+2800, which renders as
  a space);
* in Unicode normal form NFC, so that ``café`` typed two ways is one key.

:func:`check_key` is the rule; :data:`JobKey` applies it to a pydantic field.

A contact (a message's ``contact``, a job's contacts' ``email``, ``name`` and
``id``, or a contact given as a plain string) and an idempotency key (an
event's ``idempotency_key``, a wake's ``request_id``) are shown in the UI and
compared as text too, so they obey the same rule except the parts about URL
path segments (``/``, ``.`` and ``..`` are allowed), and a contact may have a
leading or trailing space (people type them; contacts are compared trimmed,
topics.replies.normal_address): :func:`check_label`, and
:data:`Contact`, :data:`Contacts` and :data:`IdempotencyKey` as pydantic fields.
"""

from __future__ import annotations

import unicodedata
from typing import Annotated, Any

from pydantic import AfterValidator, Field, StrictStr
from pydantic_core import PydanticCustomError

from topics._errors import ContractError

__all__ = [
    "CONTACT_NAMED_BY",
    "MAX_CONTACT_LENGTH",
    "MAX_KEY_LENGTH",
    "Contact",
    "Contacts",
    "IdempotencyKey",
    "JobKey",
    "JobKeyError",
    "check_contacts",
    "check_key",
    "check_label",
]

MAX_KEY_LENGTH = 200

#: The longest contact: an email address may have 254 characters (RFC 5321).
MAX_CONTACT_LENGTH = 254

_KINDS = {
    "Cc": "a control character",
    "Cf": "a format character (bidi control, zero-width or similar)",
    "Cs": "a surrogate",
    "Co": "a private-use character",
    "Cn": "an unassigned code point",
    "Zl": "a line separator",
    "Zp": "a paragraph separator",
    "Zs": "a space other than the ASCII space",
}


#: Unicode's Default_Ignorable_Code_Point ranges (DerivedCoreProperties.txt),
#: plus U+2800 BRAILLE PATTERN BLANK: characters that show as nothing or as a
#: space. Those of category Cf are refused as format characters already.
_INVISIBLE = (
    (0x00AD, 0x00AD),
    (0x034F, 0x034F),
    (0x061C, 0x061C),
    (0x115F, 0x1160),
    (0x17B4, 0x17B5),
    (0x180B, 0x180F),
    (0x200B, 0x200F),
    (0x202A, 0x202E),
    (0x2060, 0x206F),
    (0x2800, 0x2800),
    (0x3164, 0x3164),
    (0xFE00, 0xFE0F),
    (0xFEFF, 0xFEFF),
    (0xFFA0, 0xFFA0),
    (0xFFF0, 0xFFF8),
    (0x1BCA0, 0x1BCA3),
    (0x1D173, 0x1D17A),
    (0xE0000, 0xE0FFF),
)


def _invisible(char: str) -> bool:
    code = ord(char)
    return any(low <= code <= high for low, high in _INVISIBLE)


class JobKeyError(ContractError):
    """A key (a job key, a contact, an idempotency key) that breaks the rule; the
    message names the character and position."""


def _character(char: str) -> str:
    name = unicodedata.name(char, "")
    return f"U+{ord(char):04X}" + (f" ({name})" if name else "")


def check_key(value: str, what: str = "key") -> str:
    """``value`` unchanged when it is a valid key, else :class:`JobKeyError`."""
    return _check(value, what, segment=True)


def check_label(
    value: str, what: str = "value", limit: int = MAX_KEY_LENGTH, edges: bool = True
) -> str:
    """``value`` unchanged when it obeys the key rule, URL path segments aside
    (a contact, an idempotency key: ``/``, ``.`` and ``..`` are allowed), at
    most ``limit`` characters long, and (unless not ``edges``) without a
    leading or trailing space; else :class:`JobKeyError`."""
    return _check(value, what, segment=False, limit=limit, edges=edges)


def _check(
    value: str, what: str, segment: bool, limit: int = MAX_KEY_LENGTH, edges: bool = True
) -> str:
    if not value:
        raise JobKeyError(f"{what} is empty")
    if len(value) > limit:
        raise JobKeyError(f"{what} is {len(value)} characters long: at most {limit}")
    if segment and value in (".", ".."):
        raise JobKeyError(f"{what} {value!r} is not allowed (clients rewrite it in a URL path)")
    # Printable ASCII without '/' (almost every key) has no invisible
    # character and is NFC already: the per-character walk below, which names
    # the offending character, is for the others.
    plain = value.isascii() and value.isprintable() and not (segment and "/" in value)
    for position, char in enumerate("" if plain else value):
        if segment and char == "/":
            raise JobKeyError(
                f"{what} has '/' at position {position}: a key is one URL path segment"
            )
        if not char.isprintable():
            kind = _KINDS.get(unicodedata.category(char), "not printable")
            raise JobKeyError(
                f"{what} has {_character(char)} at position {position}: {kind} is not allowed"
            )
        if _invisible(char):
            raise JobKeyError(
                f"{what} has {_character(char)} at position {position}: a character that "
                "shows as nothing or as a space is not allowed"
            )
    if edges and (value[0] == " " or value[-1] == " "):
        raise JobKeyError(f"{what} starts or ends with a space")
    if not plain and not unicodedata.is_normalized("NFC", value):
        raise JobKeyError(
            f"{what} is not in Unicode normal form NFC: write it as "
            f"{unicodedata.normalize('NFC', value)!r}"
        )
    return value


def _validate(value: str) -> str:
    try:
        return check_key(value)
    except JobKeyError as exc:
        raise PydanticCustomError("job_key", "{reason}", {"reason": str(exc)}) from None


def _validate_contact(value: str) -> str:
    try:
        return check_label(value, "contact", MAX_CONTACT_LENGTH, edges=False)
    except JobKeyError as exc:
        raise PydanticCustomError("contact", "{reason}", {"reason": str(exc)}) from None


def _validate_idempotency_key(value: str) -> str:
    try:
        return check_label(value, "idempotency key")
    except JobKeyError as exc:
        raise PydanticCustomError("idempotency_key", "{reason}", {"reason": str(exc)}) from None


#: A contact's fields that name it (agents/contacts.py writes to them in this
#: order): each obeys the rule where it is a string.
CONTACT_NAMED_BY = ("email", "name", "id")


def check_contacts(value: list[Any]) -> list[Any]:
    """``value`` unchanged when every contact in it obeys :func:`check_label`'s
    rule (a string, or an object's ``email``, ``name`` and ``id`` where they are
    strings), else :class:`JobKeyError` naming the first that does not."""
    for index, contact in enumerate(value):
        if isinstance(contact, str):
            names = [(f"{index}", contact)]
        elif isinstance(contact, dict):
            names = [
                (f"{index}.{field}", contact[field])
                for field in CONTACT_NAMED_BY
                if isinstance(contact.get(field), str)
            ]
        else:
            continue
        for where, name in names:
            check_label(name, f"contact {where}", MAX_CONTACT_LENGTH, edges=False)
    return value


def _validate_contacts(value: list[Any]) -> list[Any]:
    try:
        return check_contacts(value)
    except JobKeyError as exc:
        raise PydanticCustomError("contact", "{reason}", {"reason": str(exc)}) from None


#: A job key as a pydantic field: :func:`check_key`'s rule (its message names
#: the character and its position). The JSON schema's pattern is the part of
#: the rule a schema can say (no ASCII control character, no ``/``); the
#: validator, not the pattern, enforces it.
JobKey = Annotated[
    StrictStr,
    Field(
        json_schema_extra={
            "pattern": r"^[^\x00-\x1f\x7f/]+$",
            "minLength": 1,
            "maxLength": MAX_KEY_LENGTH,
        }
    ),
    AfterValidator(_validate),
]


def _label_schema(limit: int) -> dict[str, Any]:
    return {"pattern": r"^[^\x00-\x1f\x7f]+$", "minLength": 1, "maxLength": limit}


#: A contact as a pydantic field (a message's ``contact``): :func:`check_label`'s
#: rule, its message naming the character and its position.
Contact = Annotated[
    StrictStr,
    Field(json_schema_extra=_label_schema(MAX_CONTACT_LENGTH)),
    AfterValidator(_validate_contact),
]

#: A job's contacts as a pydantic field: each contact a string, or an object whose
#: ``email``, ``name`` and ``id`` (where strings) obey :func:`check_label`'s rule.
Contacts = Annotated[list[Any], AfterValidator(_validate_contacts)]

#: An idempotency key as a pydantic field: :func:`check_label`'s rule.
IdempotencyKey = Annotated[
    StrictStr,
    Field(json_schema_extra=_label_schema(MAX_KEY_LENGTH)),
    AfterValidator(_validate_idempotency_key),
]
