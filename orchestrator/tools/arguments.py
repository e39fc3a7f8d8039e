"""Tool arguments that a JSON schema accepts, derived from a seed: what the simulated provider
sends when it "decides" to call a tool, so that demos and tests make real MCP round trips.

Deterministic: the same schema and seed give the same arguments. Where the schema offers
``examples`` (or a ``default``, an ``enum``, a ``const``) a value is picked from them, so a
tool that documents its arguments (the demo server's do) gets meaningful calls; otherwise a
value of the right type within the stated bounds. Required properties are always given,
optional ones sometimes. Local ``$ref``s (``#/$defs/...``) are followed; ``anyOf`` / ``oneOf``
take one branch. A ``pattern`` cannot be honoured in general: such a string is a plain word.
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Callable
from typing import Any

MAX_DEPTH = 6
WORDS = ("alpha", "bravo", "delta", "harbor", "lumen", "orbit", "quartz", "summit")


def example_arguments(schema: dict[str, Any], seed: str) -> dict[str, Any]:
    """Arguments for a tool whose input schema is ``schema`` (an object schema)."""
    rng = random.Random(hashlib.sha256(seed.encode()).digest())
    value = _instance(schema or {"type": "object"}, rng, root=schema or {}, depth=0)
    return value if isinstance(value, dict) else {}


def _resolve(schema: dict[str, Any], root: dict[str, Any]) -> dict[str, Any]:
    ref = schema.get("$ref")
    if not isinstance(ref, str) or not ref.startswith("#/"):
        return schema
    target: Any = root
    for part in ref[2:].split("/"):
        target = target.get(part, {}) if isinstance(target, dict) else {}
    return target if isinstance(target, dict) else {}


def _instance(schema: Any, rng: random.Random, *, root: dict[str, Any], depth: int) -> Any:
    if not isinstance(schema, dict) or depth > MAX_DEPTH:
        return None
    schema = _resolve(schema, root)
    if "const" in schema:
        return schema["const"]
    for key in ("examples", "enum"):
        if isinstance(schema.get(key), list) and schema[key]:
            return rng.choice(schema[key])
    if "default" in schema:
        return schema["default"]
    for key in ("anyOf", "oneOf"):
        branches = [b for b in schema.get(key) or [] if _resolve(b, root).get("type") != "null"]
        if branches:
            return _instance(rng.choice(branches), rng, root=root, depth=depth + 1)
    if isinstance(schema.get("allOf"), list) and schema["allOf"]:
        merged: dict[str, Any] = {}
        for part in schema["allOf"]:
            merged.update(_resolve(part, root))
        return _instance(merged, rng, root=root, depth=depth + 1)
    kind = schema.get("type")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "null")
    if kind is None:
        kind = "object" if "properties" in schema else "string"
    return _BY_TYPE.get(kind, lambda *_: None)(schema, rng, root, depth)


def _object(schema: dict[str, Any], rng: random.Random, root: dict[str, Any], depth: int) -> dict[str, Any]:
    properties = schema.get("properties") or {}
    required = set(schema.get("required") or [])
    chosen = [name for name in properties if name in required or rng.random() < 0.5]
    return {name: _instance(properties[name], rng, root=root, depth=depth + 1) for name in chosen}


def _array(schema: dict[str, Any], rng: random.Random, root: dict[str, Any], depth: int) -> list[Any]:
    low = int(schema.get("minItems", 0))
    high = int(schema.get("maxItems", max(low, 3)))
    count = rng.randint(low, max(low, min(high, low + 3)))
    items = schema.get("items") or {}
    return [_instance(items, rng, root=root, depth=depth + 1) for _ in range(count)]


def _string(schema: dict[str, Any], rng: random.Random, root: dict[str, Any], depth: int) -> str:
    low = int(schema.get("minLength", 1))
    high = int(schema.get("maxLength", max(low, 24)))
    text = "-".join(rng.choice(WORDS) for _ in range(3))
    while len(text) < low:
        text += "-" + rng.choice(WORDS)
    return text[: max(low, min(high, len(text)))]


def _number(schema: dict[str, Any], rng: random.Random, root: dict[str, Any], depth: int) -> float | int:
    integer = schema.get("type") == "integer" or (isinstance(schema.get("type"), list) and "integer" in schema["type"])
    low = schema.get("minimum", schema.get("exclusiveMinimum", 0))
    high = schema.get("maximum", schema.get("exclusiveMaximum", low + 100))
    if "exclusiveMinimum" in schema and "minimum" not in schema:
        low = low + (1 if integer else 1e-6)
    if "exclusiveMaximum" in schema and "maximum" not in schema:
        high = high - (1 if integer else 1e-6)
    if integer:
        value: float | int = rng.randint(int(-(-low // 1)), int(high // 1)) if high >= low else int(low)
        step = schema.get("multipleOf")
        if isinstance(step, int) and step > 0:
            value = (int(value) // step) * step if (int(value) // step) * step >= low else -(-int(low) // step) * step
        return value
    return min(max(round(rng.uniform(low, high), 3), low), high) if high >= low else low


def _boolean(schema: dict[str, Any], rng: random.Random, root: dict[str, Any], depth: int) -> bool:
    return rng.random() < 0.5


_BY_TYPE: dict[str, Callable[[dict[str, Any], random.Random, dict[str, Any], int], Any]] = {
    "object": _object,
    "array": _array,
    "string": _string,
    "integer": _number,
    "number": _number,
    "boolean": _boolean,
    "null": lambda *_: None,
}
