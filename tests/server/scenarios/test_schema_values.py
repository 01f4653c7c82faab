"""schema_value draws arguments that validate against the tool's JSON Schema.

The check is independent of the generator: jsonschema's Draft 2020-12 validator (with its format
checker) on hand-written tool schemas of the shapes frameworks send, on Pydantic's own schemas
(then also Pydantic's validator), and on random schemas from a Hypothesis strategy.
"""

from __future__ import annotations

import json
import random
from datetime import datetime, time
from urllib.parse import urlsplit
from enum import Enum
from typing import Literal, Optional

import pytest
from hypothesis import given, settings, strategies as st

jsonschema = pytest.importorskip("jsonschema")
pydantic = pytest.importorskip("pydantic")

from pbkv_server.scenarios.schema_values import P_OPTIONAL, schema_value  # noqa: E402

WORDS = ["claim", "film", "director", "released", "studio"]

WEATHER = {  # OpenAI's function-calling guide example shape
    "type": "object",
    "properties": {
        "location": {"type": "string", "description": "City and country e.g. Bogota, Colombia"},
        "units": {"type": "string", "enum": ["celsius", "fahrenheit"]},
    },
    "required": ["location", "units"],
    "additionalProperties": False,
}

NESTED = {
    "type": "object",
    "properties": {
        "query": {"type": "string", "minLength": 3, "maxLength": 12},
        "k": {"type": "integer", "minimum": 1, "maximum": 5},
        "score": {"type": "number", "exclusiveMinimum": 0, "exclusiveMaximum": 1},
        "step": {"type": "integer", "multipleOf": 5, "minimum": 3, "maximum": 40},
        "exclude": {"type": "array", "items": {"type": "string"}, "minItems": 2, "maxItems": 4, "uniqueItems": True},
        "filters": {
            "type": "object",
            "properties": {"year": {"type": ["integer", "null"]}, "lang": {"const": "en"},
                           "tags": {"type": "array", "items": {"enum": ["a", "b", "c"]}}},
            "required": ["year", "lang"],
            "additionalProperties": False,
        },
        "when": {"type": "string", "format": "date-time"},
        "contact": {"type": "string", "format": "email"},
        "pair": {"type": "array", "prefixItems": [{"type": "integer"}, {"type": "boolean"}], "items": False},
        "flag": {"type": "boolean"},
        "nothing": {"type": "null"},
        "meta": {"type": "object", "additionalProperties": {"type": "integer"}, "minProperties": 2},
        "choice": {"oneOf": [{"type": "integer", "minimum": 100}, {"type": "string", "maxLength": 2}]},
        "both": {"allOf": [{"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]},
                           {"properties": {"b": {"type": "string"}}, "required": ["b"]}]},
        "untyped": {"properties": {"x": {"type": "integer"}}, "required": ["x"]},
        "id": {"type": "string", "format": "uuid"},
    },
    "required": ["query", "k", "score", "step", "exclude", "filters", "when", "contact", "pair", "flag",
                 "nothing", "meta", "choice", "both", "untyped", "id"],
}

WITH_REFS = {
    "$defs": {
        "Item": {"type": "object", "properties": {"sku": {"type": "string"}, "qty": {"type": "integer", "minimum": 1}},
                 "required": ["sku", "qty"]},
        "Tree": {"type": "object", "properties": {"name": {"type": "string"},
                                                  "children": {"type": "array", "items": {"$ref": "#/$defs/Tree"}}},
                 "required": ["name", "children"]},
    },
    "type": "object",
    "properties": {"items": {"type": "array", "items": {"$ref": "#/$defs/Item"}, "minItems": 1},
                   "tree": {"$ref": "#/$defs/Tree"}},
    "required": ["items", "tree"],
}


def _formats() -> "jsonschema.FormatChecker":
    """jsonschema's checker, plus date-time, time and uri (its own need packages not installed here)."""
    checker = jsonschema.FormatChecker()

    @checker.checks("date-time", raises=ValueError)
    def _date_time(text: object) -> bool:
        return not isinstance(text, str) or ("T" in text.upper() and bool(datetime.fromisoformat(text)))

    @checker.checks("time", raises=ValueError)
    def _time(text: object) -> bool:
        return not isinstance(text, str) or bool(time.fromisoformat(text))

    @checker.checks("uri")
    def _uri(text: object) -> bool:
        return not isinstance(text, str) or bool(urlsplit(text).scheme and urlsplit(text).netloc)

    return checker


FORMATS = _formats()


def _check(schema: dict, value: object) -> None:
    cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
    cls(schema, format_checker=FORMATS).validate(value)


@pytest.mark.parametrize("schema", [WEATHER, NESTED, WITH_REFS], ids=["weather", "nested", "refs"])
def test_values_validate_against_hand_written_tool_schemas(schema):
    for seed in range(300):
        value = schema_value(schema, random.Random(seed), WORDS)
        _check(schema, value)
        json.dumps(value)  # JSON-serialisable


def test_formats_are_really_checked_by_the_independent_validator():
    # The format checker is on: a wrong value of each format is refused (else the test above proves little).
    for fmt, bad in (("date-time", "yesterday"), ("email", "nobody"), ("uuid", "x-y"), ("date", "2020-13-45"),
                     ("uri", "no scheme"), ("time", "25:99"), ("date-time", "2020-01-01T99:00:00Z")):
        with pytest.raises(jsonschema.ValidationError):
            _check({"type": "string", "format": fmt}, bad)


class Colour(str, Enum):
    red = "red"
    green = "green"


class Address(pydantic.BaseModel):
    street: str
    zip_code: str = pydantic.Field(min_length=5, max_length=5)


class Order(pydantic.BaseModel):  # the shapes pydantic writes: $defs/$ref, anyOf-null, enums, Literal
    customer: str
    quantity: int = pydantic.Field(ge=1, le=99)
    price: float = pydantic.Field(gt=0)
    colour: Colour
    mode: Literal["fast", "slow"] = "fast"
    ship_to: Optional[Address] = None
    addresses: list[Address]
    notes: dict[str, int] = {}


def test_values_validate_against_pydantic_schemas_and_parse_with_pydantic():
    schema = Order.model_json_schema()
    for seed in range(300):
        value = schema_value(schema, random.Random(seed), WORDS)
        _check(schema, value)
        Order.model_validate(value)


def test_required_always_present_optional_about_half_the_time():
    schema = {"type": "object", "properties": {"must": {"type": "string"}, "may": {"type": "integer"}},
              "required": ["must"]}
    values = [schema_value(schema, random.Random(s)) for s in range(2000)]
    assert all("must" in v for v in values)
    share = sum("may" in v for v in values) / len(values)
    # binomial(2000, 0.5): sd 0.011; 5 sd either side
    assert abs(share - P_OPTIONAL) < 0.056


def test_same_seed_same_value_other_seeds_differ():
    a = [schema_value(NESTED, random.Random(7), WORDS) for _ in range(3)]
    assert a[0] == a[1] == a[2]
    distinct = {json.dumps(schema_value(WEATHER, random.Random(s), WORDS), sort_keys=True) for s in range(20)}
    assert len(distinct) > 5


def test_strings_come_from_the_given_words():
    value = schema_value({"type": "string"}, random.Random(3), ["alpha"])
    assert set(value.split()) == {"alpha"}


def test_recursive_schema_ends_and_still_validates():
    # required recursion: only the depth bound ends it; the value is still valid (empty children)
    for seed in range(50):
        value = schema_value(WITH_REFS, random.Random(seed))
        depth, node = 0, value["tree"]
        while node["children"]:
            node, depth = node["children"][0], depth + 1
        assert depth < 10


@pytest.mark.parametrize("schema", [{"type": 5}, {"properties": 3}, {"$ref": "#/nowhere"}, {"anyOf": "x"},
                                    {"type": "array", "items": 1}, {"enum": []}, True, None, {"$ref": "http://x"}])
def test_malformed_schema_never_raises(schema):
    json.dumps(schema_value(schema, random.Random(1)))


# ---------------------------------------------------------------- random schemas (Hypothesis)

def _bounded_pair(lo: int, hi: int):
    return st.tuples(st.integers(lo, hi), st.integers(0, hi - lo)).map(lambda t: (t[0], t[0] + t[1]))


_scalars = st.one_of(
    st.just({"type": "string"}),
    _bounded_pair(0, 20).map(lambda p: {"type": "string", "minLength": p[0], "maxLength": p[1]}),
    _bounded_pair(-1000, 1000).map(lambda p: {"type": "integer", "minimum": p[0], "maximum": p[1]}),
    _bounded_pair(-50, 50).map(lambda p: {"type": "number", "minimum": p[0], "maximum": p[1]}),
    st.just({"type": "boolean"}),
    st.just({"type": "null"}),
    st.lists(st.one_of(st.integers(), st.text(max_size=5), st.booleans()), min_size=1, max_size=4).map(
        lambda xs: {"enum": xs}),
    st.sampled_from(["date", "date-time", "email", "uuid", "uri"]).map(lambda f: {"type": "string", "format": f}),
)


def _compound(children):
    names = st.text(st.characters(min_codepoint=97, max_codepoint=122), min_size=1, max_size=6)
    obj = st.tuples(st.dictionaries(names, children, max_size=4), st.data()).flatmap(
        lambda t: st.tuples(st.just(t[0]), st.lists(st.sampled_from(sorted(t[0])) if t[0] else st.nothing(),
                                                    unique=True, max_size=len(t[0])), st.booleans())).map(
        lambda t: {"type": "object", "properties": t[0], "required": t[1],
                   **({"additionalProperties": False} if t[2] else {})})
    arr = st.tuples(children, _bounded_pair(0, 4)).map(
        lambda t: {"type": "array", "items": t[0], "minItems": t[1][0], "maxItems": t[1][1]})
    union = st.lists(children, min_size=1, max_size=3).map(lambda xs: {"anyOf": xs})
    nullable = children.map(lambda c: {"anyOf": [c, {"type": "null"}]})
    return st.one_of(obj, arr, union, nullable)


_schemas = st.recursive(_scalars, _compound, max_leaves=12)


@settings(max_examples=300, deadline=None)
@given(schema=_schemas, seed=st.integers(0, 2**32))
def test_values_validate_against_random_schemas(schema, seed):
    _check(schema, schema_value(schema, random.Random(seed), WORDS))
