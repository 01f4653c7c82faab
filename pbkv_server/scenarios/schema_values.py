"""Seeded values that validate against a JSON Schema: the arguments of the simulator's tool calls.

:func:`schema_value` draws one value for a function's ``parameters`` schema (JSON Schema, the
subset tool schemas use: what OpenAI's function calling, Pydantic and the frameworks' tool
decorators write). Honoured: ``type`` (one or a list), ``enum``, ``const``, ``properties`` with
``required`` (required ones always, optional ones with probability :data:`P_OPTIONAL`),
``additionalProperties: false`` (no extra keys are ever added), ``items`` / ``prefixItems`` with
``minItems`` / ``maxItems`` / ``uniqueItems``, ``minimum`` / ``maximum`` (also exclusive) /
``multipleOf`` for numbers, ``minLength`` / ``maxLength`` and the common ``format`` values for
strings, ``anyOf`` / ``oneOf`` (one branch, non-null preferred), ``allOf`` (object branches merged),
and local ``$ref`` (``#/$defs/...``, ``#/definitions/...``). Not honoured: ``pattern`` (a value
from ``default`` / ``examples`` is used when the schema gives one), ``not``, ``if``/``then``,
``dependentRequired``; such schemas may get a value that does not validate.

Deterministic: the same schema, ``rng`` state and word list give the same value. Never raises on a
malformed schema (the HTTP layer refuses those first); what it cannot read counts as ``{}`` (any
value), and recursion stops at :data:`MAX_DEPTH` levels with the smallest value the node allows.
"""

from __future__ import annotations

import math
import random
from typing import Any, Mapping, Sequence

__all__ = ["schema_value", "P_OPTIONAL", "MAX_DEPTH"]

#: Probability that an optional (not ``required``) property is filled in.
P_OPTIONAL = 0.5
#: Nesting depth (objects, arrays, ``$ref`` hops) after which only required parts are generated.
MAX_DEPTH = 8
# Array length drawn when the schema gives no bounds (tool arguments are short lists).
_DEFAULT_ITEMS = (1, 3)
_JSON_TYPES = ("string", "number", "integer", "boolean", "object", "array", "null")
_FALLBACK_WORDS = ("alpha", "beta", "gamma", "delta", "report", "status", "query", "result")
# Strings that satisfy the named format (checked by jsonschema's FormatChecker in the tests).
_FORMATS = {
    "date": lambda r: f"20{r.randint(10, 29)}-{r.randint(1, 12):02d}-{r.randint(1, 28):02d}",
    "date-time": lambda r: f"20{r.randint(10, 29)}-{r.randint(1, 12):02d}-{r.randint(1, 28):02d}T"
                           f"{r.randint(0, 23):02d}:{r.randint(0, 59):02d}:00Z",
    "time": lambda r: f"{r.randint(0, 23):02d}:{r.randint(0, 59):02d}:00Z",
    "email": lambda r: f"user{r.randint(1, 999)}@example.com",
    "uri": lambda r: f"https://example.com/item/{r.randint(1, 9999)}",
    "url": lambda r: f"https://example.com/item/{r.randint(1, 9999)}",
    "uuid": lambda r: "%08x-%04x-4%03x-8%03x-%012x" % (r.getrandbits(32), r.getrandbits(16), r.getrandbits(12),
                                                    r.getrandbits(12), r.getrandbits(48)),
    "ipv4": lambda r: ".".join(str(r.randint(1, 254)) for _ in range(4)),
    "hostname": lambda r: f"host{r.randint(1, 99)}.example.com",
}


def schema_value(schema: Any, rng: random.Random, words: Sequence[str] = (), root: Any = None, depth: int = 0) -> Any:
    """One JSON value that validates against ``schema``.

    Args:
        schema: a JSON Schema node (a mapping; ``True`` / a non-mapping means "anything").
        rng: the seeded random source (advanced by the draw).
        words: vocabulary for strings (e.g. words of the prompt); a fixed list when empty.
        root: the document ``$ref`` pointers resolve against (default: ``schema`` itself).
        depth: current nesting depth (callers leave it at 0).

    Returns:
        a JSON-serialisable value (dict, list, str, int, float, bool or None).
    """
    root = schema if root is None else root
    if not isinstance(schema, Mapping):
        return _string({}, rng, words)
    node = _resolve(schema, root, depth)
    if "const" in node:
        return node["const"]
    enum = node.get("enum")
    if isinstance(enum, list) and enum:
        return rng.choice(enum)
    branches = _branches(node, "anyOf") or _branches(node, "oneOf")
    if branches:
        # Prefer a non-null branch: Optional[X] (anyOf [X, null]) should mostly give an X.
        real = [b for b in branches if _resolve(b, root, depth).get("type") != "null"] or branches
        merged = {k: v for k, v in node.items() if k not in ("anyOf", "oneOf")}
        return schema_value({**merged, **_resolve(rng.choice(real), root, depth)}, rng, words, root, depth + 1)
    all_of = _branches(node, "allOf")
    if all_of:
        return schema_value(_merge_all_of(node, all_of, root, depth), rng, words, root, depth + 1)
    if "default" in node and rng.random() < 0.25:
        return node["default"]
    if "pattern" in node:  # no regex inversion: a value the schema author gave, if any
        given = [*(node.get("examples") or [] if isinstance(node.get("examples"), list) else []),
                 *([node["default"]] if "default" in node else [])]
        if given:
            return rng.choice(given)
    kind = _pick_type(node, rng)
    if kind == "object":
        return _object(node, rng, words, root, depth)
    if kind == "array":
        return _array(node, rng, words, root, depth)
    if kind == "integer":
        return _integer(node, rng)
    if kind == "number":
        return _number(node, rng)
    if kind == "boolean":
        return rng.random() < 0.5
    if kind == "null":
        return None
    return _string(node, rng, words)


def _resolve(node: Mapping[str, Any], root: Any, depth: int) -> Mapping[str, Any]:
    """``node`` with a local ``$ref`` replaced by its target (siblings kept, as in 2020-12)."""
    hops = 0
    while isinstance(node.get("$ref"), str) and hops < MAX_DEPTH:
        target = _pointer(root, node["$ref"])
        rest = {k: v for k, v in node.items() if k != "$ref"}
        node = {**(target if isinstance(target, Mapping) else {}), **rest}
        hops += 1
    return node


def _pointer(root: Any, ref: str) -> Any:
    if not ref.startswith("#"):
        return None  # remote references are not fetched
    current = root
    for part in ref[1:].split("/")[1:] if ref != "#" else []:
        part = part.replace("~1", "/").replace("~0", "~")
        if isinstance(current, Mapping) and part in current:
            current = current[part]
        elif isinstance(current, list) and part.isdigit() and int(part) < len(current):
            current = current[int(part)]
        else:
            return None
    return current


def _branches(node: Mapping[str, Any], key: str) -> list[Any]:
    value = node.get(key)
    return [b for b in value if isinstance(b, Mapping)] if isinstance(value, list) else []


def _merge_all_of(node: Mapping[str, Any], branches: list[Any], root: Any, depth: int) -> dict[str, Any]:
    """All ``allOf`` branches merged into one node: properties united, ``required`` joined, the
    tighter numeric and length bounds kept, other keys taken from the last branch that has them."""
    merged: dict[str, Any] = {k: v for k, v in node.items() if k != "allOf"}
    for branch in (_resolve(b, root, depth) for b in branches):
        for key, value in branch.items():
            if key == "properties" and isinstance(value, Mapping):
                merged["properties"] = {**(merged.get("properties") or {}), **value}
            elif key == "required" and isinstance(value, list):
                merged["required"] = [*(merged.get("required") or []), *value]
            elif key in ("minimum", "exclusiveMinimum", "minLength", "minItems") and key in merged:
                merged[key] = max(merged[key], value)
            elif key in ("maximum", "exclusiveMaximum", "maxLength", "maxItems") and key in merged:
                merged[key] = min(merged[key], value)
            else:
                merged[key] = value
    return merged


def _pick_type(node: Mapping[str, Any], rng: random.Random) -> str:
    kind = node.get("type")
    if isinstance(kind, list):
        known = [k for k in kind if k in _JSON_TYPES]
        real = [k for k in known if k != "null"]
        return rng.choice(real or known) if (real or known) else "string"
    if kind in _JSON_TYPES:
        return kind
    # No type: infer it from the keywords present, as authors who leave it out mean.
    if "properties" in node or "required" in node or "additionalProperties" in node:
        return "object"
    if "items" in node or "prefixItems" in node:
        return "array"
    if any(k in node for k in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf")):
        return "number"
    return "string"


def _object(node: Mapping[str, Any], rng: random.Random, words: Sequence[str], root: Any, depth: int) -> dict:
    props = node.get("properties") if isinstance(node.get("properties"), Mapping) else {}
    required = [r for r in node.get("required") or [] if isinstance(r, str)] if isinstance(
        node.get("required"), list) else []
    out: dict[str, Any] = {}
    for name, spec in props.items():
        # Past the depth bound only required parts are drawn, so recursive schemas end.
        if name in required or (depth < MAX_DEPTH and rng.random() < P_OPTIONAL):
            out[name] = schema_value(spec, rng, words, root, depth + 1)
    extra = node.get("additionalProperties")
    for name in required:  # required but not described: any value will do; honour additionalProperties
        if name not in out:
            out[name] = schema_value(extra if isinstance(extra, Mapping) else {}, rng, words, root, depth + 1)
    low = node.get("minProperties")
    if isinstance(low, int) and len(out) < low and extra is not False:
        for i in range(low - len(out)):
            out[f"{_word(rng, words)}_{i}"] = schema_value(extra if isinstance(extra, Mapping) else {}, rng, words,
                                                          root, depth + 1)
    return out


def _array(node: Mapping[str, Any], rng: random.Random, words: Sequence[str], root: Any, depth: int) -> list:
    prefix = _branches(node, "prefixItems")
    items = node.get("items")
    low = _int_bound(node.get("minItems"), 0)
    high = _int_bound(node.get("maxItems"), None)
    if items is False:  # only the prefix is allowed
        high = len(prefix) if high is None else min(high, len(prefix))
    lo, hi = (_DEFAULT_ITEMS if depth < MAX_DEPTH else (0, 0))
    lo, hi = max(lo, low), max(hi, low)  # the default length range, raised to minItems
    if high is not None:
        lo, hi = min(lo, high), min(hi, high)  # and cut to maxItems
    count = rng.randint(lo, hi)
    item_schema = items if isinstance(items, Mapping) else {}
    out: list[Any] = []
    for i in range(count):
        spec = prefix[i] if i < len(prefix) else item_schema
        value = schema_value(spec, rng, words, root, depth + 1)
        if node.get("uniqueItems") is True:
            for _ in range(8):  # redraw a repeat a few times; a small enum may not have enough values
                if value not in out:
                    break
                value = schema_value(spec, rng, words, root, depth + 1)
            if value in out and len(out) >= low:
                break
        out.append(value)
    return out


def _int_bound(value: Any, default: int | None) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else default


def _number_bounds(node: Mapping[str, Any], step: float) -> tuple[float, float]:
    """Inclusive [low, high] from minimum/maximum and the exclusive bounds (``step`` inside them)."""
    def num(key: str) -> float | None:
        v = node.get(key)
        return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) else None

    low, high = num("minimum"), num("maximum")
    ex_low, ex_high = num("exclusiveMinimum"), num("exclusiveMaximum")
    if ex_low is not None:
        low = max(low, ex_low + step) if low is not None else ex_low + step
    if ex_high is not None:
        high = min(high, ex_high - step) if high is not None else ex_high - step
    if low is None and high is None:
        low, high = 0.0, 100.0
    elif low is None:
        low = high - 100.0
    elif high is None:
        high = low + 100.0
    return low, max(low, high)


def _integer(node: Mapping[str, Any], rng: random.Random) -> int:
    low, high = _number_bounds(node, 1.0)
    lo, hi = math.ceil(low), math.floor(high)
    step = node.get("multipleOf")
    if isinstance(step, int) and not isinstance(step, bool) and step > 0:
        first, last = -(-lo // step), hi // step  # multiples of step inside [lo, hi]
        return rng.randint(first, max(first, last)) * step
    return rng.randint(lo, max(lo, hi))


def _number(node: Mapping[str, Any], rng: random.Random) -> float | int:
    step = node.get("multipleOf")
    if isinstance(step, (int, float)) and not isinstance(step, bool) and step > 0:
        low, high = _number_bounds(node, step)
        first, last = math.ceil(low / step), math.floor(high / step)
        k = rng.randint(first, max(first, last))
        return k * step if isinstance(step, int) else round(k * step, 10)
    low, high = _number_bounds(node, 0.01)
    return round(rng.uniform(low, high), 2) if high - low >= 0.02 else low


def _word(rng: random.Random, words: Sequence[str]) -> str:
    return rng.choice(words) if words else rng.choice(_FALLBACK_WORDS)


def _string(node: Mapping[str, Any], rng: random.Random, words: Sequence[str]) -> str:
    fmt = node.get("format")
    if isinstance(fmt, str) and fmt in _FORMATS:
        text = _FORMATS[fmt](rng)
    else:
        text = " ".join(_word(rng, words) for _ in range(rng.randint(1, 4)))
    low = _int_bound(node.get("minLength"), 0) or 0
    high = _int_bound(node.get("maxLength"), None)
    while len(text) < low:  # lengths count code points, as JSON Schema does
        text += " " + _word(rng, words)
    if high is not None and len(text) > high:
        text = text[:high].rstrip() if len(text[:high].rstrip()) >= low else text[:high]
    return text
