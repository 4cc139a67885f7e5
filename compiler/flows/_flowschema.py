"""The schema subset of flows (docs/flows.md, "Schemas"): what an llm node's
answer must look like, in the flow language's own words (``list``, never
``array``). Two pure functions: ``schema_problems`` says what is wrong with a
schema, ``check_schema`` what is wrong with a value."""

from __future__ import annotations

import json
from typing import Any

__all__ = ["SCHEMA_KEYWORDS", "SCHEMA_TYPES", "check_schema", "schema_problems", "value_kind"]

#: Every keyword a schema may use; any other is refused by name.
SCHEMA_KEYWORDS = (
    "type",
    "description",
    "properties",
    "required",
    "items",
    "enum",
    "minimum",
    "maximum",
    "minLength",
    "maxLength",
)
SCHEMA_TYPES = ("string", "number", "boolean", "list", "object")
_SAID_OTHERWISE = {"array": "list", "integer": "number", "dict": "object", "str": "string"}

Path = tuple[str | int, ...]


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


#: The keywords each type takes besides type and description.
_APPLIES: dict[str, set[str]] = {
    "object": {"properties", "required"},
    "list": {"items"},
    "string": {"enum", "minLength", "maxLength"},
    "number": {"enum", "minimum", "maximum"},
    "boolean": set(),
}


def schema_problems(schema: Any, path: Path = ()) -> list[tuple[Path, str]]:
    """Every way ``schema`` leaves the subset, as (path inside the schema, what)."""
    if not isinstance(schema, dict):
        return [(path, "a schema must be a mapping with a type")]
    out: list[tuple[Path, str]] = []
    for key in schema:
        if key not in SCHEMA_KEYWORDS:
            out.append(
                (
                    (*path, str(key)),
                    f"{key!r} is not a schema keyword here (the subset is: "
                    + ", ".join(SCHEMA_KEYWORDS)
                    + ")",
                )
            )
    kind = schema.get("type")
    if kind is None:
        out.append((path, "a schema must say its type"))
        return out
    if kind not in SCHEMA_TYPES:
        hint = _SAID_OTHERWISE.get(str(kind))
        said = f" (say {hint!r})" if hint else ""
        out.append(
            ((*path, "type"), f"type {kind!r} is not one of: " + ", ".join(SCHEMA_TYPES) + said)
        )
        return out
    if "description" in schema and not isinstance(schema["description"], str):
        out.append(((*path, "description"), "description must be text"))
    allowed = _APPLIES[kind]
    for key in ("properties", "required", "items", "enum", "minimum", "maximum"):
        if key in schema and key not in allowed:
            out.append(((*path, key), f"{key!r} does not apply to type {kind!r}"))
    for key in ("minLength", "maxLength"):
        if key in schema and key not in allowed:
            out.append(((*path, key), f"{key!r} does not apply to type {kind!r}"))
    if kind == "object":
        out.extend(_object_problems(schema, path))
    if kind == "list":
        if "items" not in schema:
            out.append((path, "a list must say what its items are (items)"))
        else:
            out.extend(schema_problems(schema["items"], (*path, "items")))
    out.extend(_bound_problems(schema, kind, allowed, path))
    return out


def _object_problems(schema: dict[str, Any], path: Path) -> list[tuple[Path, str]]:
    """An object schema's properties (each a schema) and required names."""
    out: list[tuple[Path, str]] = []
    props = schema.get("properties", {})
    if not isinstance(props, dict):
        out.append(((*path, "properties"), "properties must map names to schemas"))
        props = {}
    for name, sub in props.items():
        out.extend(schema_problems(sub, (*path, "properties", str(name))))
    required = schema.get("required", [])
    if not isinstance(required, list) or not all(isinstance(r, str) for r in required):
        out.append(((*path, "required"), "required must be a list of property names"))
    else:
        for j, name in enumerate(required):
            if name not in props:
                out.append(((*path, "required", j), f"required names no property {name!r}"))
    return out


def _bound_problems(
    schema: dict[str, Any], kind: str, allowed: set[str], path: Path
) -> list[tuple[Path, str]]:
    """The enum, minimum, maximum, minLength and maxLength a type takes."""
    out: list[tuple[Path, str]] = []
    if "enum" in schema and "enum" in allowed:
        enum = schema["enum"]
        want = str if kind == "string" else None
        if not isinstance(enum, list) or not enum:
            out.append(((*path, "enum"), "enum must be a non-empty list"))
        elif any((not isinstance(e, str)) if want else not _number(e) for e in enum):
            out.append(((*path, "enum"), f"every enum value must be a {kind}"))
    for key in ("minimum", "maximum"):
        if key in schema and key in allowed and not _number(schema[key]):
            out.append(((*path, key), f"{key} must be a number"))
    for key in ("minLength", "maxLength"):
        if key in schema and key in allowed:
            n = schema[key]
            if not isinstance(n, int) or isinstance(n, bool) or n < 0:
                out.append(((*path, key), f"{key} must be a whole number, 0 or more"))
    return out


def _shown(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, sort_keys=True, default=str)


def value_kind(value: Any) -> str:
    """What ``value`` is, as a message says it: ``a string``, ``an object``, ``null``."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if _number(value):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "an object"
    return type(value).__name__


_ARTICLE = {
    "string": "a string",
    "number": "a number",
    "boolean": "a boolean",
    "list": "a list",
    "object": "an object",
}


def _chars(n: int) -> str:
    return "1 character" if n == 1 else f"{n} characters"


def check_schema(value: Any, schema: dict[str, Any], path: str = "value") -> list[str]:
    """Every way ``value`` does not fit ``schema`` (a schema of the subset), one
    message each, naming the path of the mismatch: ``decision.action must be
    one of: refund, resend, nothing``, ``tasks[2].priority must be a string,
    and it is a number, 3``. Empty when it fits. ``false``, ``0``, ``""``,
    ``[]`` and ``{}`` are values; only an absent or null property is missing."""
    out: list[str] = []
    kind = schema.get("type")
    fits = {
        "string": isinstance(value, str),
        "number": _number(value),
        "boolean": isinstance(value, bool),
        "list": isinstance(value, list),
        "object": isinstance(value, dict),
    }.get(str(kind), False)
    if not fits:
        want = _ARTICLE.get(str(kind), str(kind))
        return [f"{path} must be {want}, and it is {value_kind(value)}, {_shown(value)}"]
    if "enum" in schema and value not in schema["enum"]:
        out.append(f"{path} must be one of: " + ", ".join(str(e) for e in schema["enum"]))
    if kind == "string":
        if "minLength" in schema and len(value) < schema["minLength"]:
            out.append(f"{path} must be at least {_chars(schema['minLength'])} long")
        if "maxLength" in schema and len(value) > schema["maxLength"]:
            out.append(f"{path} must be at most {_chars(schema['maxLength'])} long")
    if kind == "number":
        if "minimum" in schema and value < schema["minimum"]:
            out.append(f"{path} must be at least {schema['minimum']}, and it is {_shown(value)}")
        if "maximum" in schema and value > schema["maximum"]:
            out.append(f"{path} must be at most {schema['maximum']}, and it is {_shown(value)}")
    if kind == "object":
        props: dict[str, Any] = schema.get("properties", {})
        for name in schema.get("required", []):
            if value.get(name) is None:
                out.append(f"{path}.{name} is required")
        for name, sub in props.items():
            if value.get(name) is not None:
                out.extend(check_schema(value[name], sub, f"{path}.{name}"))
    if kind == "list" and "items" in schema:
        for i, item in enumerate(value):
            out.extend(check_schema(item, schema["items"], f"{path}[{i}]"))
    return out
