"""How a job's subject is keyed (topics ``subject_key``; docs/memory.md,
"Subjects"): the subject's ``id`` as given, else the first contact's address in
lower case, else none (the job remembers nothing)."""

from __future__ import annotations

from typing import Any

import pytest

from topics import subject_key


@pytest.mark.parametrize(
    ("subject", "contacts", "key"),
    [
        ({"id": "Acct-42"}, ["ada@example.com"], "Acct-42"),  # given: as given, first
        ({"id": "  "}, [" <Ada@Example.COM> "], "ada@example.com"),  # blank id: the contact
        ({}, [{"name": "Ada", "email": "Ada@Example.com"}], "ada@example.com"),
        ({}, [{"name": "Ada", "id": "U-7"}], "U-7"),  # a contact's id, as given
        ({}, [{"name": "Ada"}, "bob@example.com"], None),  # only the first contact counts
        ({"name": "Ada"}, [], None),  # neither: nothing is remembered
        ({"id": 42}, [], None),  # an id that is not a string is not a key
    ],
)
def test_a_subject_is_keyed_by_its_id_else_its_first_contacts_address(
    subject: dict[str, Any], contacts: list[Any], key: str | None
) -> None:
    assert subject_key(subject, contacts) == key
