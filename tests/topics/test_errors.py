"""The one formatter of pydantic errors (topics/_errors.py): the texts each
caller printed before it existed, kept."""

from __future__ import annotations

import pytest
from pydantic import BaseModel, ConfigDict, ValidationError

from topics import describe_errors, first_error


class _Inner(BaseModel):
    model_config = ConfigDict(extra="forbid")
    n: int


class _Outer(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str
    items: list[_Inner]


def _error(data: object) -> ValidationError:
    with pytest.raises(ValidationError) as caught:
        _Outer.model_validate(data)
    return caught.value


def test_the_first_error_keeps_pydantic_s_message() -> None:
    exc = _error({"name": "x", "items": [{"n": "a"}], "more": 1})
    assert first_error(exc) == (
        "items.0.n: Input should be a valid integer, unable to parse string as an integer"
    )
    assert first_error(_error({"name": "x", "items": [], "more": 1})) == (
        "more: Extra inputs are not permitted"
    )


def test_the_whole_value_is_named_by_the_caller() -> None:
    exc = _error([])
    assert first_error(exc) == "record: Input should be a valid dictionary or instance of _Outer"
    assert first_error(exc, "value").startswith("value: ")
    assert describe_errors(exc, "body").startswith("body: ")


def test_every_error_with_unknown_fields_said_so() -> None:
    exc = _error({"items": [{"n": 1, "m": 2}], "more": 1})
    assert describe_errors(exc) == (
        "name: Field required; items.0.m: unknown field; more: unknown field"
    )


def test_fastapi_s_location_parts_are_left_out() -> None:
    errors = [
        {"loc": ("body", "key"), "msg": "Field required", "type": "missing"},
        {"loc": ("query", "limit"), "msg": "too big", "type": "less_than_equal"},
        {"loc": ("body",), "msg": "x", "type": "extra_forbidden"},
    ]
    assert describe_errors(errors, "body", skip=("body", "query", "path")) == (
        "key: Field required; limit: too big; body: unknown field"
    )
