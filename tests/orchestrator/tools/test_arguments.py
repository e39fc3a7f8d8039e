"""Schema-valid tool arguments from a seed (for the simulated provider): valid, deterministic, and
taken from the schema's examples when it has some."""

from __future__ import annotations

import jsonschema
import pytest

from orchestrator.tools.arguments import example_arguments

SCHEMAS = [
    {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]},
    {
        "type": "object",
        "properties": {
            "count": {"type": "integer", "minimum": 3, "maximum": 7},
            "ratio": {"type": "number", "exclusiveMinimum": 0, "exclusiveMaximum": 1},
            "tags": {"type": "array", "items": {"type": "string", "maxLength": 5}, "minItems": 2, "maxItems": 4},
            "mode": {"enum": ["fast", "careful"]},
            "flag": {"type": "boolean"},
            "name": {"type": "string", "minLength": 30},
            "nothing": {"type": "null"},
        },
        "required": ["count", "ratio", "tags", "mode", "flag", "name"],
    },
    {
        "type": "object",
        "$defs": {"Point": {"type": "object", "properties": {"x": {"type": "integer"}}, "required": ["x"]}},
        "properties": {"at": {"$ref": "#/$defs/Point"}, "maybe": {"anyOf": [{"type": "integer"}, {"type": "null"}]}},
        "required": ["at", "maybe"],
    },
    {
        "type": "object",
        "properties": {"step": {"type": "integer", "multipleOf": 5, "minimum": 1, "maximum": 50}},
        "required": ["step"],
    },
    {"type": "object"},
]


@pytest.mark.parametrize("schema", SCHEMAS)
@pytest.mark.parametrize("seed", ["a", "b", "c", "run-7:research_a"])
def test_the_arguments_are_valid_for_the_schema(schema, seed):
    jsonschema.validate(example_arguments(schema, seed), schema)


def test_the_same_seed_gives_the_same_arguments_and_another_seed_may_differ():
    schema = SCHEMAS[1]
    assert example_arguments(schema, "seed-1") == example_arguments(schema, "seed-1")
    assert len({repr(example_arguments(schema, f"seed-{i}")) for i in range(10)}) > 1


def test_examples_are_preferred():
    schema = {
        "type": "object",
        "properties": {"expression": {"type": "string", "examples": ["(17.5 - 2) * 3", "sqrt(2) * 100"]}},
        "required": ["expression"],
    }
    assert example_arguments(schema, "x")["expression"] in ("(17.5 - 2) * 3", "sqrt(2) * 100")


def test_the_real_servers_schemas_are_served_too(test_tools):
    for tool in test_tools:
        jsonschema.validate(example_arguments(tool.input_schema, tool.name), tool.input_schema)
