"""Bad input gets one clear error naming the object and field; good input in every accepted shape."""

import json

import pytest
import yaml

from models.errors import InputError
from models.kube_objects import build_snapshot, parse_documents
from models.policy import Policy
from models.quantity import QuantityError, cpu_millis, memory_bytes, parse_quantity
from tests.kube_dicts import node, redis_pod, snapshot


@pytest.mark.parametrize(
    ("text", "millis", "units"),
    [
        ("500m", 500, 1),
        ("1.5", 1500, 2),
        ("2Gi", 2 * 2**30 * 1000, 2 * 2**30),
        ("512Mi", 2**29 * 1000, 2**29),
        ("1e9", 10**12, 10**9),
        ("128974848", 128974848000, 128974848),
        ("129M", 129 * 10**9, 129 * 10**6),
        ("1E3", 10**6, 1000),
    ],
)
def test_quantities_are_exact(text: str, millis: int, units: int) -> None:
    assert cpu_millis(text) == millis
    assert memory_bytes(text) == units


@pytest.mark.parametrize("bad", ["", "abc", "1.2.3", "5Gb", "--1", "1e", None, True])
def test_malformed_quantity_rejected(bad: object) -> None:
    with pytest.raises(QuantityError):
        parse_quantity(bad)


def test_bad_quantity_names_object_and_field() -> None:
    pod = redis_pod("r-0-0", "r", 0, "master", memory="lots")
    with pytest.raises(InputError) as err:
        snapshot([node("n1", "a", "a1")], [pod])
    assert "pod default/r-0-0" in str(err.value)
    assert "spec.containers[0].resources" in str(err.value)


def test_malformed_yaml_is_one_line() -> None:
    with pytest.raises(InputError) as err:
        parse_documents("kind: List\nitems: [\n", "dump.yaml")
    assert "dump.yaml" in str(err.value) and "\n" not in str(err.value)


def test_list_json_multidoc_and_nested_lists_agree() -> None:
    objs = [node("n1", "a", "a1"), redis_pod("r-0-0", "r", 0, "master")]
    as_list = yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": objs})
    as_json = json.dumps({"kind": "List", "items": objs})
    multi = yaml.safe_dump_all(objs)
    policy = Policy()
    snaps = [build_snapshot(parse_documents(t), policy) for t in (as_list, as_json, multi)]
    assert all(len(s.nodes) == 1 and len(s.members) == 1 for s in snaps)


def test_requests_sum_containers_and_take_max_with_init() -> None:
    pod = redis_pod("r-0-0", "r", 0, "master", cpu="500m", memory="1Gi")
    pod["spec"]["containers"].append(
        {"name": "exporter", "resources": {"limits": {"cpu": "100m", "memory": "128Mi"}}}
    )
    pod["spec"]["initContainers"] = [
        {"name": "init", "resources": {"requests": {"cpu": "2", "memory": "64Mi"}}}
    ]
    snap = snapshot([node("n1", "a", "a1")], [pod])
    req = snap.members[0].pod.requests
    assert req.cpu == 2000 and req.memory == 2**30 + 128 * 2**20


def test_shard_with_two_masters_is_skipped_and_reported() -> None:
    pods = [
        redis_pod("r-0-0", "r", 0, "master", node="n1"),
        redis_pod("r-0-1", "r", 0, "master", node="n2"),
    ]
    snap = snapshot([node("n1", "a", "a1"), node("n2", "b", "b1")], pods)
    assert not snap.members
    assert any("2 masters" in i.message and "default/r/0" in i.object for i in snap.issues)
    assert {p.key for p in snap.other_pods} == {
        "default/r-0-0",
        "default/r-0-1",
    }  # still counted as load


def test_pod_without_shard_label_is_reported() -> None:
    pod = redis_pod("r-0-0", "r", 0, "master")
    del pod["metadata"]["labels"]["redis-shard"]
    snap = snapshot([node("n1", "a", "a1")], [pod])
    assert not snap.members
    assert any(i.object == "pod default/r-0-0" and "redis-shard" in i.message for i in snap.issues)


def test_node_without_zone_label_takes_no_new_pod() -> None:
    from solver.solve import SolveOptions, solve

    nodes = [node("n1", "a", "a1"), node("nolabel", None, None, memory="64Gi")]
    snap = snapshot(nodes, [redis_pod("r-0-0", "r", 0, "master")])
    assert any(i.object == "node nolabel" and "zone" in i.message for i in snap.issues)
    plan = solve(snap, Policy(), options=SolveOptions(time_limit=5, workers=1))
    assert next(a.node for a in plan.assignments) == "n1"


def test_unknown_policy_key_and_contradictions() -> None:
    from pydantic import ValidationError

    with pytest.raises(ValidationError, match="Extra inputs"):
        Policy.model_validate({"rules": {"maxMasterPerNode": 1}})
    with pytest.raises(ValidationError, match="host must be 'required'"):
        Policy.model_validate({"rules": {"replicaSeparation": {"host": "preferred"}}})
    with pytest.raises(ValidationError, match="selector must not be empty"):
        Policy.model_validate({"selector": {}})


def test_non_string_taint_value_is_an_error_naming_the_node() -> None:
    bad = node("n1", "a", "a1")
    bad["spec"]["taints"] = [{"key": "k", "value": 1, "effect": "NoSchedule"}]
    with pytest.raises(InputError, match="node n1"):
        snapshot([bad], [])
