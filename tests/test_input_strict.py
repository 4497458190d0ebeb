"""Input held to Kubernetes' own rules: what the API server would refuse is an error naming the
object and field, odd but usable input is a warning, and nothing is silently dropped or merged."""

import json
from typing import Any

import pytest

from models.errors import InputError
from models.kube_objects import SINGLE_ZONE, build_snapshot, parse_documents
from models.policy import Policy
from models.quantity import INT64_MAX, QuantityError, cpu_millis, memory_bytes, parse_quantity
from tests.kube_dicts import node, redis_pod, snapshot

# --------------------------------------------------------------------------- quantities


@pytest.mark.parametrize(
    "text", [" 1Gi", "1Gi ", "1 Gi", "\t500m", "1Gi\n", "١", "1.2.3", ".", "+", "1e", "1K", "1e1.5"]
)
def test_quantities_outside_the_kubernetes_grammar_are_rejected(text: str) -> None:
    with pytest.raises(QuantityError):
        parse_quantity(text)


@pytest.mark.parametrize(
    ("text", "units"),
    [
        ("1.", 1),
        (".5", 1),  # rounded up to a whole unit
        ("+2", 2),
        ("0", 0),
        ("1Ki", 1024),
        ("1.5Gi", 3 * 2**29),
        ("1e-40", 1),  # a tiny positive amount still takes one unit
        ("0" * 5000 + "1", 1),
        ("7Ei", 7 * 2**60),
        (str(INT64_MAX), INT64_MAX),
    ],
)
def test_quantities_in_the_grammar_are_exact(text: str, units: int) -> None:
    assert memory_bytes(text) == units


@pytest.mark.parametrize("big", ["8Ei", str(INT64_MAX + 1), "1e30", "1e999999999", 10**19, 1e30])
def test_quantities_beyond_what_kubernetes_holds_are_rejected(big: object) -> None:
    with pytest.raises(QuantityError, match="larger than Kubernetes can hold"):
        parse_quantity(big)


def test_cpu_must_fit_in_int64_millicores() -> None:
    assert cpu_millis("9223372036854775") == 9223372036854775000
    with pytest.raises(QuantityError, match="millicores"):
        cpu_millis("9223372036854776")


# --------------------------------------------------------------------------- objects


def only_error(nodes: list[dict[str, Any]], pods: list[dict[str, Any]]) -> str:
    with pytest.raises(InputError) as err:
        snapshot(nodes, pods)
    message = str(err.value)
    assert "\n" not in message
    return message


def test_negative_memory_request_names_the_pod_and_field() -> None:
    message = only_error([node("n1", "a", "a1")], [redis_pod("r-0-0", "r", 0, None, memory="-1Gi")])
    assert message.startswith("pod default/r-0-0: spec.containers[0].resources.requests.memory:")
    assert "negative" in message


def test_negative_limit_is_rejected_even_when_a_request_is_set() -> None:
    pod = redis_pod("r-0-0", "r", 0, None)
    pod["spec"]["containers"][0]["resources"]["limits"] = {"cpu": "-1"}
    message = only_error([node("n1", "a", "a1")], [pod])
    assert "spec.containers[0].resources.limits.cpu" in message


def test_negative_allocatable_names_the_node_and_field() -> None:
    message = only_error([node("n1", "a", "a1", memory="-16Gi")], [])
    assert message.startswith("node n1: status.allocatable.memory:") and "negative" in message


def test_huge_node_memory_is_an_error_naming_node_and_field() -> None:
    message = only_error([node("n1", "a", "a1", memory="1e30")], [])
    assert message.startswith("node n1: status.allocatable.memory:")
    assert "larger than Kubernetes can hold" in message


def test_the_largest_quantity_kubernetes_holds_is_accepted() -> None:
    snap = snapshot([node("n1", "a", "a1", memory=str(INT64_MAX))], [])
    assert snap.nodes[0].allocatable.memory == INT64_MAX


def test_quantity_with_a_leading_space_names_the_field() -> None:
    message = only_error([node("n1", "a", "a1", cpu=" 4")], [])
    assert message.startswith("node n1: status.allocatable.cpu:") and "no spaces" in message


def test_fractional_pod_count_is_an_error() -> None:
    bad = node("n1", "a", "a1")
    bad["status"]["allocatable"]["pods"] = "1.5"
    assert "status.allocatable.pods" in only_error([bad], [])


def test_an_item_without_kind_is_an_error_not_dropped() -> None:
    pod = redis_pod("r-0-0", "r", 0, None)
    del pod["kind"]
    text = json.dumps({"kind": "List", "items": [node("n1", "a", "a1"), pod]})
    with pytest.raises(InputError, match=r"^object default/r-0-0: kind: is missing"):
        build_snapshot(parse_documents(text, "dump.json"), Policy())


def test_an_unnamed_item_without_kind_is_named_by_its_position() -> None:
    with pytest.raises(InputError, match=r"^object #2: kind: is missing"):
        build_snapshot(
            parse_documents('[{"kind": "Node", "metadata": {"name": "n"}}, {}]'), Policy()
        )


@pytest.mark.parametrize(
    "text",
    [
        "[" * 100_000 + "]" * 100_000,
        '{"kind": "List", "items": [' + "[" * 50_000 + "]" * 50_000 + "]}",
        "kind: List\nitems:\n- x: " + "[" * 50_000 + "]" * 50_000,
    ],
    ids=["json", "json-in-list", "yaml-flow"],
)
def test_deep_nesting_is_one_clear_error(text: str) -> None:
    with pytest.raises(InputError, match="nested too deeply"):
        build_snapshot(parse_documents(text, "deep"), Policy())


# --------------------------------------------------------------------------- topology labels


def test_no_node_with_a_zone_label_is_an_error_naming_the_label() -> None:
    snap = snapshot([node("n1", None, None), node("n2", None, None)], [])
    errors = [i for i in snap.issues if i.severity == "error"]
    assert [i.object for i in errors] == ["cluster"]
    assert "every node lacks the zone label 'topology.kubernetes.io/zone'" in errors[0].message
    assert "takes no new Redis pod" in errors[0].message
    assert all(n.zone is None for n in snap.nodes)  # no invented one-zone cluster


def test_the_missing_zone_label_is_the_one_the_policy_names() -> None:
    policy = Policy.model_validate({"topology": {"zone": "example.com/zone"}})
    snap = snapshot([node("n1", "a", "a1")], [], policy)
    assert any("'example.com/zone' (policy topology.zone)" in i.message for i in snap.issues)


def test_a_policy_without_zone_level_puts_every_node_in_one_named_zone() -> None:
    policy = Policy.model_validate(
        {"topology": {"zone": ""}, "rules": {"replicaSeparation": {"zone": "ignore"}}}
    )
    snap = snapshot([node("n1", None, "r1"), node("n2", None, "r2")], [], policy)
    assert {n.zone for n in snap.nodes} == {SINGLE_ZONE} and SINGLE_ZONE
    assert not [i for i in snap.issues if "zone" in i.message]


def test_an_empty_zone_label_is_missing_not_a_zone_named_empty() -> None:
    empty = node("n2", "a", "a1")
    empty["metadata"]["labels"]["topology.kubernetes.io/zone"] = ""
    snap = snapshot([node("n1", "a", "a1"), empty], [])
    assert snap.node_by_name["n2"].zone is None
    assert any(i.object == "node n2" and "is empty" in i.message for i in snap.issues)


# --------------------------------------------------------------------------- shards


def sized_pod(name: str, size: str, node_name: str | None = None) -> dict[str, Any]:
    return redis_pod(
        name,
        "r",
        0,
        None,
        node=node_name,
        annotations={"redis-placer.io/shard-size": size},
    )


def test_a_shard_short_of_its_annotated_size_is_a_warning() -> None:
    snap = snapshot([node("n1", "a", "a1")], [sized_pod("r-0-0", "3"), sized_pod("r-0-1", "3")])
    [issue] = [i for i in snap.issues if i.object == "shard default/r/0"]
    assert issue.severity == "warning"
    assert "2 of 3 members present" in issue.message and "running short" in issue.message
    assert "redis-placer.io/shard-size" in issue.message


def test_members_disagreeing_on_the_shard_size_is_an_error() -> None:
    snap = snapshot([node("n1", "a", "a1")], [sized_pod("r-0-0", "2"), sized_pod("r-0-1", "3")])
    [issue] = [i for i in snap.issues if i.object == "shard default/r/0"]
    assert issue.severity == "error" and "disagree" in issue.message


@pytest.mark.parametrize("size", ["0", "-1", "two", "٣", "1.5"])
def test_a_bad_shard_size_annotation_is_an_error_naming_it(size: str) -> None:
    snap = snapshot([node("n1", "a", "a1")], [sized_pod("r-0-0", size)])
    [issue] = [i for i in snap.issues if i.object == "pod default/r-0-0"]
    assert issue.severity == "error" and "redis-placer.io/shard-size" in issue.message


def test_a_shard_running_two_masters_is_kept_for_the_audit() -> None:
    snap = snapshot(
        [node("n1", "a", "a1"), node("n2", "b", "b1")],
        [
            redis_pod("r-0-0", "r", 0, "master", node="n1"),
            redis_pod("r-0-1", "r", 0, "master", node="n2"),
        ],
    )
    assert not snap.members
    assert [m.key for m in snap.skipped_members] == ["default/r-0-0", "default/r-0-1"]
