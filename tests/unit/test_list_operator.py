"""The list operator on arrays of strings, numbers, booleans, objects and files:
filter, extract, order, limit, in Dify's order, and its errors by name."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from firstgate.common.cancel import CancelToken
from firstgate.common.files import File, FileType, TransferMethod
from firstgate.nodes import list_operator
from firstgate.nodes.base import NodeContext, NodeRunError


class Vars:
    def __init__(self, values: dict[tuple[str, ...], Any]) -> None:
        self.values = values

    def get(self, selector: tuple[str, ...]) -> Any:
        return self.values.get(tuple(selector))


def run(value: Any, **data: Any) -> dict[str, Any]:
    parsed = list_operator.Data.model_validate(
        {"type": "list-operator", "variable": ["src", "list"], **data}
    )
    ctx = NodeContext(
        node_id="op",
        attempt=1,
        variables=Vars({("src", "list"): value, ("src", "min"): "2", ("src", "n"): "2"}),
        cancel=CancelToken(),
    )
    return list_operator.run(parsed, ctx).outputs


def where(*conditions: tuple[str, str, Any]) -> dict[str, Any]:
    return {
        "filter_by": {
            "enabled": True,
            "conditions": [
                {"key": key, "comparison_operator": op, "value": value}
                for key, op, value in conditions
            ],
        }
    }


def test_strings() -> None:
    words = ["apple", "banana", "cherry", "avocado"]
    assert run(words, **where(("", "start with", "a")))["result"] == ["apple", "avocado"]
    assert run(words, **where(("", "contains", "an"), ("", "not contains", "b")))["result"] == []
    assert run(words, **where(("", "is not", "banana")))["result"] == ["apple", "cherry", "avocado"]
    assert run(["", "x"], **where(("", "not empty", "")))["result"] == ["x"]
    # `in`: the item is found in the value (Dify's rule, a text value is searched).
    assert run(words, **where(("", "in", "apple,cherry")))["result"] == ["apple", "cherry"]


def test_numbers_with_a_templated_value_then_order_and_limit() -> None:
    out = run(
        [5, 1, 4, 2, 3],
        **where(("", "≥", "{{#src.min#}}")),
        order_by={"enabled": True, "value": "desc"},
        limit={"enabled": True, "size": 2},
    )
    assert out == {"result": [5, 4], "first_record": 5, "last_record": 4}


def test_extract_takes_the_nth_item_before_ordering() -> None:
    out = run(
        ["c", "a", "b"],
        extract_by={"enabled": True, "serial": "{{#src.n#}}"},
        order_by={"enabled": True, "value": "asc"},
    )
    assert out["result"] == ["a"]
    for serial in ("3", "0", "-1"):  # counted from 1: no item 0, none from the end
        with pytest.raises(NodeRunError) as info:
            run(["a", "b"], extract_by={"enabled": True, "serial": serial})
        assert info.value.message_key == "errors.listOperator.serial"


def test_booleans() -> None:
    assert run([True, False, True], **where(("", "is", True)))["result"] == [True, True]
    assert run([True, False], **where(("", "is not", True)))["result"] == [False]


def test_objects_by_key() -> None:
    people = [{"name": "ann", "age": 40}, {"name": "bob", "age": 25}, {"name": "cy"}]
    out = run(people, **where(("age", ">", "30")))
    assert out["result"] == [{"name": "ann", "age": 40}]
    ordered = run(people, order_by={"enabled": True, "key": "age", "value": "asc"})["result"]
    assert [p["name"] for p in ordered] == ["bob", "ann", "cy"]  # no age: last
    assert run(people, **where(("name", "end with", "b")))["result"] == [people[1]]


def file(name: str, kind: FileType, size: int) -> File:
    return File(
        type=kind,
        transfer_method=TransferMethod.LOCAL_FILE,
        filename=name,
        extension=Path(name).suffix,
        mime_type="application/octet-stream",
        size=size,
    )


def test_files_by_type_name_and_size() -> None:
    files = [
        file("a.pdf", FileType.DOCUMENT, 300),
        file("b.png", FileType.IMAGE, 100),
        file("c.txt", FileType.DOCUMENT, 200),
    ]
    documents = run(files, **where(("type", "in", ["document"])))["result"]
    assert [f.filename for f in documents] == ["a.pdf", "c.txt"]
    assert [f.filename for f in run(files, **where(("extension", "is", ".png")))["result"]] == [
        "b.png"
    ]
    small = run(files, **where(("size", "<", "250")), order_by={"enabled": True, "key": "size"})
    assert [f.filename for f in small["result"]] == ["b.png", "c.txt"]


def test_an_empty_list_gives_empty_outputs() -> None:
    assert run([], **where(("", "is", "x"))) == {
        "result": [],
        "first_record": None,
        "last_record": None,
    }


@pytest.mark.parametrize(
    ("value", "data", "key"),
    [
        (None, {}, "errors.listOperator.notFound"),
        ("text", {}, "errors.listOperator.notArray"),
        ([1, 2], where(("", "contains", "1")), "errors.listOperator.condition"),
        (["a"], where(("", ">", "1")), "errors.listOperator.condition"),
        ([1, 2], where(("", ">", "many")), "errors.listOperator.notNumber"),
        ([1, "a"], {"order_by": {"enabled": True}}, "errors.listOperator.order"),
    ],
)
def test_mistakes_are_named(value: Any, data: dict[str, Any], key: str) -> None:
    with pytest.raises(NodeRunError) as info:
        run(value, **data)
    assert info.value.message_key == key
