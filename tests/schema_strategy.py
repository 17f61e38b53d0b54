"""Hypothesis strategies built from a document's JSON Schema, valid or hostile.

A small walker over the schemas pydantic writes (``$ref`` into ``$defs``, ``anyOf``/``oneOf``,
objects, arrays, numbers with their bounds, enums). ``hostile=True`` lets every leaf be a bad
value instead (NaN, infinity, a negative, a huge or a wrong-typed one), so the loaders meet
both documents that should pass and documents that must be refused in one line.
"""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

BAD_LEAVES = st.sampled_from([float("nan"), float("inf"), float("-inf"), -1, -1e308, 1e308, 5e-324, 10**40, "7", "", None, True, [], {}])
JSON_LEAVES = st.none() | st.booleans() | st.integers(-10, 10**6) | st.floats(-1e6, 1e6, allow_nan=False) | st.text(max_size=8)
MAX_DEPTH = 6


def from_schema(schema: dict, *, hostile: bool = False, overrides: dict[str, st.SearchStrategy] | None = None) -> st.SearchStrategy:
    """Documents shaped by ``schema``; ``overrides`` fixes the strategy of a property by name."""
    return _walk(schema, schema.get("$defs", {}), hostile, overrides or {}, 0)


def _walk(schema: dict, defs: dict, hostile: bool, overrides: dict, depth: int) -> st.SearchStrategy:
    valid = _valid(schema, defs, hostile, overrides, depth)
    leaf = not any(k in schema for k in ("properties", "items", "additionalProperties", "$ref", "anyOf", "oneOf"))
    return (valid | BAD_LEAVES) if hostile and leaf else valid


def _valid(schema: dict, defs: dict, hostile: bool, overrides: dict, depth: int) -> st.SearchStrategy:
    if "$ref" in schema:
        return _walk(defs[schema["$ref"].rsplit("/", 1)[-1]], defs, hostile, overrides, depth)
    for key in ("anyOf", "oneOf"):
        if key in schema:
            return st.one_of([_walk(s, defs, hostile, overrides, depth) for s in schema[key]])
    if "allOf" in schema and len(schema["allOf"]) == 1:
        return _walk(schema["allOf"][0], defs, hostile, overrides, depth)
    if "enum" in schema:
        return st.sampled_from(schema["enum"])
    if "const" in schema:
        return st.just(schema["const"])
    kind = schema.get("type")
    if kind == "object" or "properties" in schema:
        return _object(schema, defs, hostile, overrides, depth)
    if kind == "array":
        items = schema.get("items", {})
        if depth >= MAX_DEPTH:
            return st.just([])
        return st.lists(_walk(items, defs, hostile, overrides, depth + 1), max_size=3)
    if kind == "integer":
        low = schema.get("minimum", schema.get("exclusiveMinimum", -(10**6) - 1) + 1)
        high = schema.get("maximum", schema.get("exclusiveMaximum", 10**6 + 1) - 1)
        return st.integers(int(low), int(max(low, min(high, low + 10**6))))
    if kind == "number":
        low = schema.get("minimum", schema.get("exclusiveMinimum", -1e6))
        high = schema.get("maximum", schema.get("exclusiveMaximum", 1e6))
        exclusive = "exclusiveMinimum" in schema or "exclusiveMaximum" in schema
        return st.floats(low, max(low, high), allow_nan=False, allow_infinity=False, exclude_min=exclusive and "exclusiveMinimum" in schema,
                         exclude_max="exclusiveMaximum" in schema)
    if kind == "string":
        return st.text(max_size=12)
    if kind == "boolean":
        return st.booleans()
    if kind == "null":
        return st.none()
    return JSON_LEAVES


def _object(schema: dict, defs: dict, hostile: bool, overrides: dict, depth: int) -> st.SearchStrategy:
    props = schema.get("properties", {})
    required = set(schema.get("required", []))

    def prop(name: str, sub: dict) -> st.SearchStrategy:
        return overrides[name] if name in overrides else _walk(sub, defs, hostile, overrides, depth + 1)

    fixed = {name: prop(name, sub) for name, sub in props.items() if name in required}
    optional = {} if depth >= MAX_DEPTH else {name: prop(name, sub) for name, sub in props.items() if name not in required}
    extra = schema.get("additionalProperties")
    if props or not isinstance(extra, dict):
        return st.fixed_dictionaries(fixed, optional=optional)
    if depth >= MAX_DEPTH:
        return st.just({})
    return st.dictionaries(st.text(min_size=1, max_size=8), _walk(extra, defs, hostile, overrides, depth + 1), max_size=3)


