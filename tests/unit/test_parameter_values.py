"""The parameter extractor's check and coercion of extracted values, with
Dify's rules (its tests' cases, in values of our own)."""

from __future__ import annotations

from typing import Any

import pytest
from firstgate.nodes.parameter_extractor.values import (
    ExtractionProblem,
    Parameter,
    check,
    coerce,
    fallback_result,
    json_schema,
    type_name,
)

CITY = Parameter("city", "string", "the city", True)
GUESTS = Parameter("guests", "number", "how many", True)
VEGAN = Parameter("vegan", "boolean", "vegan menu", True)
SIZE = Parameter("size", "select", "table size", True, ("small", "large"))
DISHES = Parameter("dishes", "array[string]", "dishes", True)
PRICES = Parameter("prices", "array[number]", "prices", True)
ROOMS = Parameter("rooms", "array[object]", "rooms", True)
FLAGS = Parameter("flags", "array[boolean]", "flags", True)
NOTE = Parameter("note", "string", "a note", False)


@pytest.mark.parametrize(
    ("parameters", "result"),
    [
        ([CITY], {"city": "Lyon"}),
        ([GUESTS], {"guests": 3}),
        ([GUESTS], {"guests": 2.5}),
        ([GUESTS], {"guests": True}),  # a boolean counts as a number, as in Dify
        ([VEGAN], {"vegan": False}),
        ([SIZE], {"size": "large"}),
        ([DISHES], {"dishes": ["soup", "bread"]}),
        ([DISHES], {"dishes": []}),
        ([PRICES], {"prices": [3, 4.5]}),
        ([ROOMS], {"rooms": [{"n": 1}]}),
        ([FLAGS], {"flags": [True, False]}),
        ([CITY, NOTE], {"city": "Lyon", "note": "window seat"}),
    ],
)
def test_answers_that_fit(parameters: list[Parameter], result: dict[str, Any]) -> None:
    check(parameters, result)  # raises nothing


@pytest.mark.parametrize(
    ("parameters", "result", "key", "params"),
    [
        ([CITY, GUESTS], {"city": "Lyon"}, "errors.extractor.count", {"expected": 2, "got": 1}),
        ([CITY], {"city": "Lyon", "x": 1}, "errors.extractor.count", {"expected": 1, "got": 2}),
        # an optional parameter left out still breaks the count (Dify's rule)
        ([CITY, NOTE], {"city": "Lyon"}, "errors.extractor.count", {"expected": 2, "got": 1}),
        ([CITY, NOTE], {"note": "x", "other": 1}, "errors.extractor.required", {"name": "city"}),
        ([CITY], {"city": None}, "errors.extractor.type", {"got": "none"}),
        ([CITY], {"city": 12}, "errors.extractor.type", {"got": "integer"}),
        ([GUESTS], {"guests": "three"}, "errors.extractor.type", {"got": "string"}),
        ([GUESTS], {"guests": "3"}, "errors.extractor.type", {"got": "string"}),
        ([VEGAN], {"vegan": "yes"}, "errors.extractor.type", {"expected": "boolean"}),
        ([DISHES], {"dishes": "soup, bread"}, "errors.extractor.type", {"got": "string"}),
        ([PRICES], {"prices": [1, "two"]}, "errors.extractor.type", {"got": "array[any]"}),
        ([ROOMS], {"rooms": [{"n": 1}, "two"]}, "errors.extractor.type", {"got": "array[any]"}),
        ([SIZE], {"size": "medium"}, "errors.extractor.option", {"name": "size"}),
        ([SIZE], {"size": 1}, "errors.extractor.type", {"expected": "string"}),
    ],
)
def test_answers_that_do_not_fit(
    parameters: list[Parameter], result: dict[str, Any], key: str, params: dict[str, Any]
) -> None:
    with pytest.raises(ExtractionProblem) as caught:
        check(parameters, result)
    assert caught.value.message_key == key
    assert params.items() <= caught.value.params.items()


@pytest.mark.parametrize(
    ("parameter", "raw", "value"),
    [
        (CITY, "Lyon", "Lyon"),
        (CITY, 12, ""),
        (GUESTS, 3, 3),
        (GUESTS, "19.5", 19.5),
        (GUESTS, "7", 7),
        (GUESTS, True, 1),
        (GUESTS, "seven", 0),
        (GUESTS, ["7"], 0),
        (GUESTS, "nan", 0),
        (VEGAN, True, True),
        (VEGAN, 0, False),
        (VEGAN, "yes", False),
        (SIZE, "small", "small"),
        (DISHES, ["soup", 3, "bread"], ["soup", "bread"]),
        (DISHES, "soup", []),
        (PRICES, [1, "2.5", "x", 3], [1, 2.5, 3]),
        (ROOMS, [{"n": 1}, 2], [{"n": 1}]),
        (FLAGS, [True, 1, False], [True, False]),
    ],
)
def test_values_are_coerced_to_their_types(parameter: Parameter, raw: Any, value: Any) -> None:
    assert coerce([parameter], {parameter.name: raw}) == {parameter.name: value}


def test_missing_values_become_the_empty_value_of_their_type() -> None:
    everything = [CITY, GUESTS, VEGAN, SIZE, DISHES, PRICES, ROOMS, FLAGS]
    assert coerce(everything, {}) == {
        "city": "",
        "guests": 0,
        "vegan": False,
        "size": "",
        "dishes": [],
        "prices": [],
        "rooms": [],
        "flags": [],
    }


def test_an_answer_without_json_fills_scalars_only() -> None:
    assert fallback_result([CITY, GUESTS, DISHES]) == {"city": "", "guests": 0}


def test_the_schema_the_model_fills() -> None:
    schema = json_schema([CITY, SIZE, PRICES, NOTE])
    assert schema == {
        "type": "object",
        "properties": {
            "city": {"description": "the city", "type": "string"},
            "size": {"description": "table size", "type": "string", "enum": ["small", "large"]},
            "prices": {"description": "prices", "type": "array", "items": {"type": "number"}},
            "note": {"description": "a note", "type": "string"},
        },
        "required": ["city", "size", "prices"],
    }


@pytest.mark.parametrize(
    ("value", "name"),
    [
        (None, "none"),
        (1.5, "float"),
        ([1, 2.5], "array[number]"),
        ([], "array[any]"),
        ({}, "object"),
    ],
)
def test_type_names(value: Any, name: str) -> None:
    assert type_name(value) == name
