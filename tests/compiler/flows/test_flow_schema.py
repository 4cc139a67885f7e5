"""The schema subset (docs/flows.md, "Schemas"): what a value must look like,
with the path of every mismatch; and what a schema may say."""

from __future__ import annotations

from typing import Any

import pytest

from compiler import check_schema
from compiler.flows._flowschema import schema_problems

DECISION: dict[str, Any] = {
    "type": "object",
    "properties": {
        "action": {"type": "string", "enum": ["refund", "resend", "nothing"]},
        "amount": {"type": "number", "minimum": 0, "maximum": 100},
        "note": {"type": "string", "minLength": 1, "maxLength": 5},
        "tags": {"type": "list", "items": {"type": "string"}},
        "urgent": {"type": "boolean"},
    },
    "required": ["action"],
}

VALUES: list[tuple[Any, list[str]]] = [
    ({"action": "refund"}, []),
    ({"action": "nothing", "amount": 0, "note": "ok", "tags": [], "urgent": False}, []),
    ({"action": "refnd"}, ["decision.action must be one of: refund, resend, nothing"]),
    ({}, ["decision.action is required"]),
    ({"action": None}, ["decision.action is required"]),
    ("refund", ['decision must be an object, and it is a string, "refund"']),
    ({"action": "refund", "amount": 101}, ["decision.amount must be at most 100, and it is 101"]),
    ({"action": "refund", "amount": -1}, ["decision.amount must be at least 0, and it is -1"]),
    (
        {"action": "refund", "amount": "5"},
        ['decision.amount must be a number, and it is a string, "5"'],
    ),
    (
        {"action": "refund", "amount": True},
        ["decision.amount must be a number, and it is a boolean, true"],
    ),
    ({"action": "refund", "note": ""}, ["decision.note must be at least 1 character long"]),
    ({"action": "refund", "note": "too long"}, ["decision.note must be at most 5 characters long"]),
    (
        {"action": "refund", "tags": ["a", 3]},
        ["decision.tags[1] must be a string, and it is a number, 3"],
    ),
    (
        {"action": "x", "urgent": "yes"},
        [
            "decision.action must be one of: refund, resend, nothing",
            'decision.urgent must be a boolean, and it is a string, "yes"',
        ],
    ),
]


@pytest.mark.parametrize(("value", "errors"), VALUES)
def test_check_schema(value: Any, errors: list[str]) -> None:
    assert check_schema(value, DECISION, "decision") == errors


def test_the_path_defaults_to_value() -> None:
    assert check_schema(3, {"type": "string"}) == ["value must be a string, and it is a number, 3"]


SCHEMAS: list[tuple[Any, list[tuple[tuple[str | int, ...], str]]]] = [
    (DECISION, []),
    (
        {"type": "array", "items": {"type": "string"}},
        [
            (
                ("type",),
                "type 'array' is not one of: string, number, boolean, list, object (say 'list')",
            )
        ],
    ),
    ({"type": "list"}, [((), "a list must say what its items are (items)")]),
    (
        {"type": "object", "additionalProperties": False},
        [
            (
                ("additionalProperties",),
                "'additionalProperties' is not a schema keyword here (the "
                "subset is: type, description, properties, required, items, enum, minimum, "
                "maximum, minLength, maxLength)",
            )
        ],
    ),
    (
        {"type": "string", "minimum": 1},
        [(("minimum",), "'minimum' does not apply to type 'string'")],
    ),
    ({"description": "no type"}, [((), "a schema must say its type")]),
    (
        {"type": "object", "properties": {"a": {"type": "string"}}, "required": ["b"]},
        [(("required", 0), "required names no property 'b'")],
    ),
    ({"type": "string", "enum": [1]}, [(("enum",), "every enum value must be a string")]),
    (
        {"type": "object", "properties": {"n": {"type": "number", "maxLength": 2}}},
        [(("properties", "n", "maxLength"), "'maxLength' does not apply to type 'number'")],
    ),
]


@pytest.mark.parametrize(("schema", "problems"), SCHEMAS)
def test_schema_problems(schema: Any, problems: list[tuple[tuple[str | int, ...], str]]) -> None:
    assert schema_problems(schema) == problems
