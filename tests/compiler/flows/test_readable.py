"""A flow's values as a person reads them (docs/flows.md, "What a person reads"):
labels from the channels' descriptions, nested objects indented, lists as
bullets, bounded, and no JSON, whatever the values hold."""

from __future__ import annotations

import unicodedata
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from compiler import fields_text, label_of, readable, readable_inline, shown_fields
from compiler.flows._readable import DEPTH, INLINE_CHARS, ITEMS, TEXT_CHARS, VALUE_CHARS

INVOICE = {
    "id": "A-17",
    "status": "shipped",
    "total": 120.0,
    "paid": False,
    "customer": {"name": "Ada", "address": {"city": "Ghent", "zip": "9000"}},
    "lines": [{"sku": "W-1", "qty": 2}, {"sku": "G-2", "qty": 1}],
    "tags": ["late", "gift"],
    "note": None,
}


def test_an_object_is_labelled_fields_nested_indented_and_lists_as_bullets() -> None:
    fields = shown_fields({"invoice": INVOICE}, {"invoice": "The invoice as the shop has it."})
    assert [(f.channel, f.label, f.block) for f in fields] == [
        ("invoice", "The invoice as the shop has it", True)
    ]
    assert fields_text(fields).splitlines() == [
        "The invoice as the shop has it:",
        "  ID: A-17",
        "  Status: shipped",
        "  Total: 120",
        "  Paid: no",
        "  Customer:",
        "    Name: Ada",
        "    Address:",
        "      City: Ghent",
        "      Zip: 9000",
        "  Lines:",
        "    - Sku: W-1",
        "      Qty: 2",
        "    - Sku: G-2",
        "      Qty: 1",
        "  Tags:",
        "    - late",
        "    - gift",
        "  Note: none",
    ]


def test_a_scalar_is_one_line_beside_its_label() -> None:
    fields = shown_fields({"amount": 12.5, "reason": "late delivery", "ok": True, "empty": []})
    assert [(f.label, f.text, f.block) for f in fields] == [
        ("Amount", "12.5", False),
        ("Reason", "late delivery", False),
        ("Ok", "yes", False),
        ("Empty", "none", False),
    ]
    assert fields_text(fields) == "Amount: 12.5\nReason: late delivery\nOk: yes\nEmpty: none"


def test_a_missing_description_labels_the_channel_by_its_name_in_words() -> None:
    assert label_of("order_id") == "Order ID"
    assert label_of("refundAmount") == "Refund amount"
    assert label_of("order", "  ") == "Order"
    assert label_of("order", "The order.\n") == "The order"
    assert shown_fields({"order_id": "A-1"}, {"other": "x"})[0].label == "Order ID"
    assert readable({"createdAt": "today", "user-name": "ada"}) == (
        "Created at: today\nUser name: ada"
    )


def test_long_values_and_many_items_are_bounded_and_counted() -> None:
    long = "x" * (VALUE_CHARS * 3)
    [field] = shown_fields({"note": long})
    assert len(field.text) == VALUE_CHARS
    assert field.text.endswith("…")
    many = readable(list(range(ITEMS + 7)))
    assert many.splitlines()[-1] == "… and 7 more"
    assert len(many.splitlines()) == ITEMS + 1
    deep: Any = "bottom"
    for _ in range(DEPTH + 3):
        deep = {"in": deep}
    assert "bottom" not in readable(deep)
    assert readable(deep).splitlines()[DEPTH].endswith("In: …")
    huge = readable([{"k": "v" * VALUE_CHARS} for _ in range(ITEMS)] * 3)
    assert len(huge) <= TEXT_CHARS + 40
    assert huge.splitlines()[-1].endswith("more lines)")
    assert len(readable_inline({"a": long})) == INLINE_CHARS
    label = label_of("x", "word " * 100)
    assert len(label) <= 80
    assert label.endswith("…")


HOSTILE = "safe\u202eevil\u200b\u2066x\u2069\x1b[31m\x00"


def test_hostile_strings_cannot_reorder_hide_or_forge_a_line() -> None:
    shown = shown_fields(
        {"note": f"fine\nAmount: 0\r\n{HOSTILE}", f"key\n{HOSTILE}": {f"k\u2028ey{HOSTILE}": 1}}
    )
    text = fields_text(shown)
    assert text.splitlines() == [
        "Note: fine Amount: 0 safeevilx[31m",
        "Key safeevilx[31m:",
        "  K eysafeevilx[31m: 1",
    ]
    for ch in "\u202e\u200b\u2066\u2069\x1b\x00\u2028":
        assert ch not in text
    assert readable_inline(HOSTILE) == "safeevilx[31m"
    # A reply keeps its own lines, without what hides or reorders text.
    assert readable(f"Hello,\r\n\n\n\n{HOSTILE}\n") == "Hello,\n\nsafeevilx[31m"


def test_a_value_inside_a_sentence_reads_as_words() -> None:
    assert readable_inline({"action": "refund"}) == "action: refund"
    assert readable_inline({"order_id": "A-1", "items": ["W", "G"], "paid": True}) == (
        "order ID: A-1, items: (W, G), paid: yes"
    )
    assert readable_inline(["a", {"b": 1}]) == "a, (b: 1)"
    assert readable_inline([]) == "none"
    assert readable_inline(3.0) == "3"


def test_a_reply_on_its_own_is_its_text_or_its_fields() -> None:
    assert readable("Refunded order A-1.") == "Refunded order A-1."
    assert readable({"refunded": True, "amount": 12}, "What was done.") == (
        "What was done:\n  Refunded: yes\n  Amount: 12"
    )
    assert readable(["one", "two"]) == "- one\n- two"
    assert readable(None) == "none"


#: Strings with none of JSON's marks of their own (so any in the text would be JSON's).
_TEXT = st.text(st.characters(blacklist_characters='{}[]"'), max_size=20)
_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | _TEXT,
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(_TEXT, inner, max_size=5),
    max_leaves=30,
)


@given(_VALUES)
def test_no_value_is_shown_as_json_nor_unbounded(value: Any) -> None:
    for text in (fields_text(shown_fields({"v": value})), readable_inline(value)):
        assert not set(text) & set('{}[]"'), text
        assert len(text) <= TEXT_CHARS + 40
        assert not any(unicodedata.category(ch) in ("Cc", "Cf") for ch in text if ch != "\n")
