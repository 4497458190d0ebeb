"""The generated reference pages (docs/hooks/reference.py) list every policy key and metric as the
code reads and serves them."""

import importlib.util
import logging
import sys
from pathlib import Path
from types import ModuleType
from typing import Any, Literal

import pytest
from pydantic import BaseModel, Field

from models.policy import Policy
from placer.metrics import Metrics

HOOK = Path(__file__).resolve().parent.parent / "docs" / "hooks" / "reference.py"


def _load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("docs_reference_hook", HOOK)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while defining them
    spec.loader.exec_module(module)
    return module


reference = _load()


def _object_schema(schema: dict[str, Any], node: dict[str, Any]) -> dict[str, Any] | None:
    """The object schema ``node`` names (through $ref or one nullable anyOf), if any."""
    for choice in node.get("anyOf", [node]):
        ref = choice.get("$ref")
        if ref:
            return schema["$defs"][ref.rsplit("/", 1)[1]]
        if choice.get("properties"):
            return choice
    return None


def _leaves(
    schema: dict[str, Any], node: dict[str, Any], data: Any, prefix: str = ""
) -> dict[str, Any]:
    """Every key the model reads, with its default: maps (``selector``) are one key, and an
    object key whose default is null is listed itself and with the keys of its object."""
    out: dict[str, Any] = {}
    for key, sub in (node.get("properties") or {}).items():
        path = f"{prefix}{key}"
        # A key of an object that is off by default has its own default, or none.
        value = data.get(key) if isinstance(data, dict) else sub.get("default")
        inner = _object_schema(schema, sub)
        if inner is None:
            out[path] = value
            continue
        if value is None:
            out[path] = None
        out.update(_leaves(schema, inner, value, path + "."))
    return out


def test_every_policy_key_is_listed_with_its_default_and_a_description() -> None:
    defaults = Policy().model_dump(mode="json", by_alias=True)
    schema = Policy.model_json_schema(by_alias=True)
    keys = {k.path: k for s in reference.sections(schema, defaults) for k in s.keys}
    expected = _leaves(schema, schema, defaults)
    assert set(keys) == set(expected)
    for path, value in expected.items():
        if keys[path].has_default:
            assert keys[path].default == value, path
        else:  # a key of an object that is off by default: required once the object is given
            assert value is None and path.rsplit(".", 1)[0] in keys, path
        assert keys[path].description, f"{path} has no description in models/policy.py"


def test_the_rendered_page_has_a_row_per_key_with_the_limits_the_model_enforces() -> None:
    page = reference.render("# Policy\n\n<!-- policy-reference -->\n")
    assert "<!-- policy-reference -->" not in page
    row = next(line for line in page.splitlines() if line.startswith("| `weights.survival` |"))
    assert "| integer, >= 0, <= 1,000,000 | `100` |" in row
    selector = next(line for line in page.splitlines() if line.startswith("| `selector` |"))
    assert '`{"app": "redis"}`' in selector  # a default made by a factory, read from the model


class _Nested(BaseModel):
    described: int = Field(default=1, description="said")
    bare: str = "x"


class _Model(BaseModel):
    inner: _Nested = _Nested()
    choice: int | None = Field(default=None, ge=2, description="either")


def test_a_key_without_description_is_a_warning_that_fails_a_strict_build(
    caplog: pytest.LogCaptureFixture,
) -> None:
    schema = _Model.model_json_schema()
    defaults = _Model().model_dump(mode="json")
    with caplog.at_level(logging.WARNING, logger="mkdocs"):
        page = reference.policy_reference(schema, defaults)
    assert "| `inner.described` | integer | `1` | said |" in page
    assert "| `choice` | integer or null, >= 2 | `null` | either |" in page
    assert [r.getMessage() for r in caplog.records] == [
        "policy key inner.bare has no description (models/policy.py)"
    ]
    assert all(r.name.startswith("mkdocs.") for r in caplog.records)


def test_the_metrics_table_names_every_metric_as_prometheus_exposes_it() -> None:
    exposed = {
        sample.name
        for family in Metrics().registry.collect()
        for sample in family.samples
        if not sample.name.endswith(("_created", "_bucket", "_sum", "_count"))
    }
    page = reference.render("<!-- metrics-reference -->")
    listed = {line.split("`")[1] for line in page.splitlines() if line.startswith("| `")}
    assert exposed <= listed  # metrics with labels have no sample until a value is set
    assert "redis_placer_solve_duration_seconds" in listed
    assert "redis_placer_leader" in listed
    assert len(listed) == len([c for c in vars(Metrics()).values() if hasattr(c, "_documentation")])


class _Ot(BaseModel):
    """Read from OT's labels."""

    kind: Literal["ot"] = Field(default="ot", description="which")
    leader_suffix: str = Field(default="-leader", description="suffix")


class _Own(BaseModel):
    kind: Literal["own"] = Field(default="own", description="which")


class _WithForms(BaseModel):
    identity: _Ot | _Own = Field(default=_Ot(), discriminator="kind", description="how")


def test_a_key_of_several_forms_gets_a_table_per_form() -> None:
    schema = _WithForms.model_json_schema()
    page = reference.policy_reference(schema, _WithForms().model_dump(mode="json"))
    assert "| `identity` | object or object |" in page
    assert "### `identity` as an object of `kind`, `leader_suffix`" in page
    assert "### `identity` as an object of `kind`\n" in page
    assert "_Ot" not in page and "_Own" not in page  # no class name of the code leaks
    assert '| `identity.leader_suffix` | string | `"-leader"` | suffix |' in page
    own = page.split("### `identity` as an object of `kind`\n")[1]
    assert '| `identity.kind` | `"own"` | `"own"` | which |' in own  # its own default
