"""mkdocs hook: the reference tables that come from the code, never written by hand.

A page asks for one with a marker line:

- ``<!-- policy-reference -->``: every policy key, from ``Policy.model_json_schema(by_alias=True)``
  (its type with its allowed range, default and description), so a key is documented as it is read;
- ``<!-- policy-defaults -->``: the default policy file, as ``redis-placer policy
  --print-defaults`` prints it;
- ``<!-- metrics-reference -->``: every metric the binder serves, from ``placer.metrics.Metrics``.

A policy key without a description is a warning, which ``mkdocs build --strict`` turns into a
failed build.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from typing import Any

log = logging.getLogger("mkdocs.hooks.reference")

MARKERS = ("<!-- policy-reference -->", "<!-- policy-defaults -->", "<!-- metrics-reference -->")


@dataclass(frozen=True)
class Key:
    """One policy key as the schema states it."""

    path: str
    type: str
    default: Any
    has_default: bool
    limits: str
    description: str


@dataclass(frozen=True)
class Section:
    """A policy object: a heading, its description and its keys (leaves only)."""

    path: str
    description: str
    keys: tuple[Key, ...]
    title: str = ""
    """The heading, when it is not the path: one form of a key that takes one of several."""


def _ref_name(ref: str) -> str:
    return ref.rsplit("/", 1)[-1]


def _target(prop: dict[str, Any], defs: dict[str, Any]) -> dict[str, Any] | None:
    """The object definition a property refers to, if it is an object with keys of its own."""
    ref = prop.get("$ref")
    if ref is None and len(prop.get("allOf", [])) == 1:
        ref = prop["allOf"][0].get("$ref")
    if ref is None:
        return None
    target = defs.get(_ref_name(ref), {})
    return target if target.get("properties") else None


def _alternatives(prop: dict[str, Any], defs: dict[str, Any]) -> list[dict[str, Any]]:
    """The object forms a union (or a list's items) may take, each with keys of its own."""
    members = [*prop.get("anyOf", []), *prop.get("oneOf", [])]
    if isinstance(prop.get("items"), dict):
        members.append(prop["items"])
    found = []
    for member in members:
        target = _target(member, defs)
        if target is not None:
            found.append(target)
        else:
            found.extend(_alternatives(member, defs))
    return found


def type_of(prop: dict[str, Any], defs: dict[str, Any]) -> str:
    """A short human spelling of a JSON schema type."""
    if "$ref" in prop:
        target = defs.get(_ref_name(prop["$ref"]), {})
        if "enum" in target:
            return type_of(target, defs)
        return "object"  # its keys get a table of their own; the class name is the code's
    if "const" in prop:
        return f"`{json.dumps(prop['const'])}`"
    if "enum" in prop:
        return " \\| ".join(f"`{json.dumps(v)}`" for v in prop["enum"])
    for union in ("anyOf", "oneOf", "allOf"):
        if union in prop:
            return " or ".join(type_of(option, defs) for option in prop[union])
    kind = prop.get("type")
    if kind == "array":
        return f"list of {type_of(prop.get('items', {}), defs)}"
    if kind == "object":
        values = prop.get("additionalProperties")
        if isinstance(values, dict):
            return f"map of string to {type_of(values, defs)}"
        return "object"
    if isinstance(kind, list):
        return " or ".join(str(k) for k in kind)
    return str(kind) if kind else "any"


def _limits(prop: dict[str, Any]) -> str:
    """The range a number must lie in; in a union (an optional number), its members' ranges."""
    members = prop.get("anyOf") or prop.get("oneOf")
    if members:
        return "; ".join(filter(None, (_limits(m) for m in members)))
    bounds = [
        (">=", prop.get("minimum")),
        (">", prop.get("exclusiveMinimum")),
        ("<=", prop.get("maximum")),
        ("<", prop.get("exclusiveMaximum")),
    ]
    return ", ".join(f"{op} {_number(value)}" for op, value in bounds if value is not None)


def _number(value: float) -> str:
    return f"{value:,}" if isinstance(value, int) else f"{value:g}"


_MISSING = object()


def _lookup(data: Any, path: str) -> Any:
    for part in path.split("."):
        if not isinstance(data, dict) or part not in data:
            return _MISSING
        data = data[part]
    return data


def sections(schema: dict[str, Any], defaults: dict[str, Any]) -> list[Section]:
    """Every object of the schema, depth first from the top, each with its leaf keys.

    ``defaults`` is the default policy as its file spells it: a default the schema cannot state
    (one made by a factory) is read from there.
    """
    defs: dict[str, Any] = schema.get("$defs", {})
    out: list[Section] = []

    def walk(
        path: str, obj: dict[str, Any], description: str, title: str = "", form: bool = False
    ) -> None:
        """``form``: one form of a key that takes one of several. The defaults file holds only
        the default form, so the keys' defaults are the schema's."""
        keys: list[Key] = []
        nested: list[tuple[str, dict[str, Any], str, str, bool]] = []
        for name, prop in obj.get("properties", {}).items():
            full = f"{path}.{name}" if path else name
            target = _target(prop, defs)
            own = str(prop.get("description") or "")
            if target is not None:
                nested.append((full, target, own or str(target.get("description") or ""), "", form))
                continue
            for shape in _alternatives(prop, defs):
                fields = ", ".join(f"`{k}`" for k in shape.get("properties", {}))
                heading = f"`{full}` as an object of {fields}"
                nested.append((full, shape, str(shape.get("description") or ""), heading, True))
            default = _MISSING if form else _lookup(defaults, full)
            if default is _MISSING:
                default = prop.get("default", _MISSING)
            keys.append(
                Key(
                    path=full,
                    type=type_of(prop, defs),
                    default=None if default is _MISSING else default,
                    has_default=default is not _MISSING,
                    limits=_limits(prop),
                    description=own,
                )
            )
        if keys or not nested:
            out.append(Section(path, description, tuple(keys), title))
        for child in nested:
            walk(*child)

    walk("", schema, str(schema.get("description") or ""))
    return out


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _default(key: Key) -> str:
    if not key.has_default:
        return "required"
    return f"`{json.dumps(key.default)}`"


def policy_reference(schema: dict[str, Any], defaults: dict[str, Any]) -> str:
    """Markdown: one table per policy object, one row per key."""
    parts: list[str] = []
    for section in sections(schema, defaults):
        title = section.title or (f"`{section.path}`" if section.path else "Top level")
        parts.append(f"### {title}\n")
        if section.description:
            parts.append(section.description + "\n")
        parts.append("| key | type | default | description |")
        parts.append("|---|---|---|---|")
        for key in section.keys:
            if not key.description:
                log.warning("policy key %s has no description (models/policy.py)", key.path)
            kind = f"{key.type}, {key.limits}" if key.limits else key.type
            row = [f"`{key.path}`", kind, _default(key), _cell(key.description)]
            parts.append("| " + " | ".join(row) + " |")
        parts.append("")
    return "\n".join(parts)


def policy_defaults() -> str:
    from placer.commands.policy import defaults_yaml

    return "```yaml\n" + defaults_yaml() + "```\n"


def metrics_reference() -> str:
    """Markdown: every metric of a fresh ``Metrics`` registry, as Prometheus names it."""
    from prometheus_client.metrics import MetricWrapperBase

    from placer.metrics import Metrics

    metrics = Metrics()
    rows = ["| metric | type | labels | help |", "|---|---|---|---|"]
    collectors = [c for c in vars(metrics).values() if isinstance(c, MetricWrapperBase)]
    for collector in sorted(collectors, key=lambda c: c._name):
        kind = collector._type
        name = collector._name + ("_total" if kind == "counter" else "")
        labels = ", ".join(f"`{label}`" for label in collector._labelnames)
        rows.append(f"| `{name}` | {kind} | {labels} | {_cell(collector._documentation)} |")
    return "\n".join(rows) + "\n"


def render(markdown: str) -> str:
    """Replace each marker line by what it stands for."""
    if not any(marker in markdown for marker in MARKERS):
        return markdown
    if MARKERS[0] in markdown:
        from models.policy import Policy

        schema = Policy.model_json_schema(by_alias=True)
        defaults = Policy().model_dump(mode="json", by_alias=True)
        markdown = markdown.replace(MARKERS[0], policy_reference(schema, defaults))
    if MARKERS[1] in markdown:
        markdown = markdown.replace(MARKERS[1], policy_defaults())
    if MARKERS[2] in markdown:
        markdown = markdown.replace(MARKERS[2], metrics_reference())
    return markdown


def on_page_markdown(markdown: str, **kwargs: Any) -> str:
    return render(markdown)
