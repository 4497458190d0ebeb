"""A pod seen again on its way to running is not parsed afresh, and the reuse never changes
what a fresh parse would say. JSON goes through orjson with the standard library's answers."""

import copy
import json
import math
import re
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from models import json_text
from models.errors import InputError
from models.kube_objects import ParseCache, parse_documents, parse_pod
from tests.kube_dicts import redis_pod


def _pod() -> dict[str, Any]:
    pod = redis_pod("c-0-0", "c", 0, None, schedulerName="redis-placer", memory="2Gi")
    pod["metadata"].update(uid="u-1", resourceVersion="10")
    pod["spec"]["tolerations"] = [{"key": "k", "operator": "Exists", "effect": "NoSchedule"}]
    return pod


def _bound(pod: dict[str, Any], node: str, version: str) -> dict[str, Any]:
    out = copy.deepcopy(pod)
    out["metadata"]["resourceVersion"] = version
    out["metadata"].setdefault("annotations", {})["redis-placer.io/role"] = "master"
    out["spec"]["nodeName"] = node
    out["status"] = {"phase": "Running", "podIP": "10.0.0.7"}
    return out


def test_a_bound_echo_is_the_earlier_parse_with_its_node_and_matches_a_fresh_parse(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    cache = ParseCache()
    first = cache.pod(_pod())
    parses = 0
    real = parse_pod

    def counting(obj: Any) -> Any:
        nonlocal parses
        parses += 1
        return real(obj)

    monkeypatch.setattr("models.kube_objects.parse_pod", counting)
    bound = _bound(_pod(), "n1", "11")
    again = cache.pod(bound)
    assert parses == 0  # built from the earlier parse
    assert again == real(bound)
    assert again.node_name == "n1" and again.phase == "Running" and again.requests == first.requests


@pytest.mark.parametrize(
    "change",
    [
        lambda p: p["spec"]["containers"][0]["resources"]["requests"].update(memory="4Gi"),
        lambda p: p["spec"].update(schedulingGates=[{"name": "g"}]),
        lambda p: p["metadata"]["labels"].update(extra="1"),
        lambda p: p["spec"].pop("tolerations"),
    ],
    ids=["requests", "gates", "labels", "tolerations"],
)
def test_any_other_change_is_parsed_afresh(change: Any) -> None:
    cache = ParseCache()
    cache.pod(_pod())
    changed = _bound(_pod(), "n1", "11")
    change(changed)
    assert cache.pod(changed) == parse_pod(changed)


def test_a_malformed_echo_is_judged_by_a_fresh_parse() -> None:
    cache = ParseCache()
    cache.pod(_pod())
    broken = _bound(_pod(), "n1", "11")
    broken["status"]["podIP"] = {"not": "an address"}
    with pytest.raises(InputError):
        cache.pod(broken)


def test_json_decodes_as_the_standard_library_does_even_where_orjson_refuses() -> None:
    assert json_text.loads('{"a": [1, 2.5, "x"]}') == {"a": [1, 2.5, "x"]}
    assert math.isnan(json_text.loads('{"a": NaN}')["a"])  # orjson refuses NaN
    assert (
        json_text.loads('{"big": 123456789012345678901234567890}')["big"]
        == 123456789012345678901234567890
    )
    with pytest.raises(json.JSONDecodeError):
        json_text.loads('{"a": ')


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet="0123456789x ,:-", max_size=60))
def test_the_long_number_guard_finds_every_run_of_19_digits(text: str) -> None:
    expected = re.search(r"[0-9]{19}", text) is not None
    assert json_text.has_long_number(text) is expected
    assert json_text.has_long_number(text.encode()) is expected


@settings(max_examples=200, deadline=None)
@given(
    st.recursive(
        st.none() | st.booleans() | st.integers() | st.text(max_size=8),
        lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=4), inner),
        max_leaves=12,
    )
)
def test_json_decodes_any_document_as_the_standard_library_does(value: Any) -> None:
    text = json.dumps(value)
    assert json_text.loads(text) == json.loads(text)
    assert json_text.loads(text.encode()) == json.loads(text)


def test_a_dump_too_deep_for_orjson_gets_the_same_error_as_before() -> None:
    deep = "[" * 100_000 + "]" * 100_000
    with pytest.raises(InputError, match="nested too deeply"):
        parse_documents(deep, "dump.json")


def test_indented_output_is_the_standard_librarys_for_plain_data() -> None:
    data = {"b": [1, {"c": None}], "a": "é", "n": 2.5, "t": True}
    assert json.loads(json_text.dumps_indented(data)) == data
    assert json_text.dumps_indented({"x": [1]}) == json.dumps({"x": [1]}, indent=2)
    assert json.loads(json_text.dumps_indented({1: "non-string key"})) == {"1": "non-string key"}
    accented = {"message": "zone é — rack"}
    assert json_text.dumps_indented(accented) == json.dumps(accented, indent=2)  # escaped, ASCII
