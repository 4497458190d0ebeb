"""The in-memory adapter keeps the API server's rules the binder depends on."""

from typing import Any

from placer.kube import BindOutcome, EvictOutcome, PatchOutcome
from placer.kube.fake import FakeKubeAdapter
from placer.kube.objects import apply_merge_patch, build_pin_patch, status_message

GATE = "redis-placer.io/placement"


def pod(name: str, gated: bool = False, **labels: str) -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": [{"name": "redis"}]}
    if gated:
        spec["schedulingGates"] = [{"name": GATE}]
    return {"metadata": {"name": name, "namespace": "ns", "labels": labels}, "spec": spec}


def test_a_pod_is_bound_once() -> None:
    fake = FakeKubeAdapter(pods=[pod("a")])
    uid = fake.pods[("ns", "a")]["metadata"]["uid"]
    assert fake.bind_pod("ns", "a", uid, "n1").outcome is BindOutcome.BOUND
    again = fake.bind_pod("ns", "a", uid, "n2")
    assert again.outcome is BindOutcome.CONFLICT and again.bound_node == "n1"
    assert fake.bind_pod("ns", "a", "other-uid", "n1").outcome is BindOutcome.CONFLICT
    assert fake.bind_pod("ns", "zzz", None, "n1").outcome is BindOutcome.GONE
    assert fake.binds == [(("ns", "a"), "n1")]


def test_gated_pods_are_not_bound_but_pinned() -> None:
    fake = FakeKubeAdapter(pods=[pod("g", gated=True)])
    assert fake.bind_pod("ns", "g", None, "n1").outcome is BindOutcome.CONFLICT
    version = fake.pods[("ns", "g")]["metadata"]["resourceVersion"]
    assert fake.pin_and_ungate("ns", "g", "n1", GATE, "0").outcome is PatchOutcome.CONFLICT
    result = fake.pin_and_ungate("ns", "g", "n1", GATE, version)
    assert result.outcome is PatchOutcome.PATCHED and result.pod is not None
    assert "schedulingGates" not in result.pod["spec"]
    terms = result.pod["spec"]["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"
    ]["nodeSelectorTerms"]
    assert terms == [
        {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1"]}]}
    ]
    new_version = result.pod["metadata"]["resourceVersion"]
    assert fake.pin_and_ungate("ns", "g", "n1", GATE, new_version).outcome is PatchOutcome.NOT_GATED
    assert fake.bind_pod("ns", "g", None, "n1").ok


def test_evictions_and_labels_and_watch() -> None:
    fake = FakeKubeAdapter(
        pods=[pod("a", app="redis"), pod("b", app="redis"), pod("c", app="other")],
        evict_blocked=lambda p: "pdb redis-0" if p["metadata"]["name"] == "b" else None,
    )
    _, version = fake.list_pods_with_version()
    assert [p["metadata"]["name"] for p in fake.list_pods(label_selector="app=redis")] == ["a", "b"]
    assert fake.evict_pod("ns", "a").outcome is EvictOutcome.EVICTED
    blocked = fake.evict_pod("ns", "b")
    assert blocked.outcome is EvictOutcome.BLOCKED and blocked.message == "pdb redis-0"
    assert fake.evict_pod("ns", "a").outcome is EvictOutcome.GONE
    assert fake.patch_pod_labels("ns", "b", {"app": None, "redis-role": "master"}).ok
    labels = fake.pods[("ns", "b")]["metadata"]["labels"]
    assert labels == {"redis-role": "master"}
    events = [
        (e.type, e.object["metadata"]["name"]) for e in fake.watch_pods(resource_version=version)
    ]
    assert events == [("DELETED", "a"), ("MODIFIED", "b")]
    assert fake.record_event(fake.pods[("ns", "b")], "Moved", "m", "Warning")
    assert fake.events[0]["involvedObject"]["name"] == "b"
    assert fake.write_configmap("ns", "r", {"k": "v"}) == "created"
    assert fake.write_configmap("ns", "r", {"k": "w"}) == "replaced"
    assert fake.read_configmap("ns", "r") == {"k": "w"}


def test_merge_patch_semantics() -> None:
    target = {"a": {"b": 1, "c": [1, 2]}, "d": 1}
    assert apply_merge_patch(target, {"a": {"c": [3], "b": None}, "e": 2}) == {
        "a": {"c": [3]},
        "d": 1,
        "e": 2,
    }


def test_pin_patch_keeps_an_existing_pin_once() -> None:
    pinned = {
        "spec": {
            "schedulingGates": [{"name": GATE}],
            "affinity": {
                "nodeAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": {
                        "nodeSelectorTerms": [
                            {
                                "matchFields": [
                                    {"key": "metadata.name", "operator": "In", "values": ["n"]}
                                ]
                            }
                        ]
                    }
                }
            },
        }
    }
    patch = build_pin_patch(pinned, "n", GATE, "3")
    terms = patch["spec"]["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"
    ]["nodeSelectorTerms"]
    assert terms == [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n"]}]}]


def test_status_message_reads_status_bodies_and_plain_text() -> None:
    assert status_message(b'{"message": "m", "details": {"causes": [{"message": "c"}]}}') == "m; c"
    assert status_message("<html>bad gateway</html>") == "<html>bad gateway</html>"
    assert status_message(None, "fallback") == "fallback"
