"""The binder's cache: following the pod and node watches, assumed bindings, and when it changed."""

from collections.abc import Iterator
from typing import Any

import pytest

from placer.binder.cache import ClusterCache, _Relisted
from placer.kube.adapter import WatchEvent, WatchExpired
from placer.kube.fake import FakeKubeAdapter
from tests.kube_dicts import node, redis_pod


def _cluster() -> tuple[FakeKubeAdapter, ClusterCache]:
    fake = FakeKubeAdapter(
        nodes=[node(f"n{i}", "a", "r1") for i in range(3)],
        pods=[redis_pod("r-0", "c", 0, "master")],
    )
    cache = ClusterCache(fake)
    cache.resync()
    return fake, cache


def test_pod_events_are_applied_and_each_one_is_announced() -> None:
    fake, cache = _cluster()
    seen: list[int] = []
    before = cache.generation
    fake.add_pod(redis_pod("r-1", "c", 0, "replica"))
    fake.patch_pod_labels("default", "r-1", {"extra": "yes"})
    fake.delete_pod("default", "r-0")
    assert cache.poll(0, on_event=lambda: seen.append(1)) == 3
    assert len(seen) == 3
    assert set(cache.pods) == {("default", "r-1")}
    assert cache.pods[("default", "r-1")]["metadata"]["labels"]["extra"] == "yes"
    assert cache.generation > before
    settled = cache.generation
    assert cache.poll(0) == 0 and cache.generation == settled  # nothing new, nothing changed


def test_an_assumed_binding_survives_a_late_event_of_the_pending_pod() -> None:
    """kube-scheduler's assumed pods: the old pending version must not make the pod pending again."""
    fake, cache = _cluster()
    fake.add_pod(redis_pod("r-1", "c", 0, "replica"))
    cache.poll(0)
    pending = dict(cache.pods[("default", "r-1")])
    cache.note_bound(("default", "r-1"), "n1")
    assert cache.pods[("default", "r-1")]["spec"]["nodeName"] == "n1"
    cache.apply(WatchEvent("MODIFIED", pending))  # the same version, arriving late
    assert cache.pods[("default", "r-1")]["spec"]["nodeName"] == "n1"
    assert fake.bind_pod("default", "r-1", None, "n1").ok
    cache.poll(0)  # the server's own binding arrives and replaces the assumption
    assert cache.pods[("default", "r-1")]["spec"]["nodeName"] == "n1"
    assert cache._assumed == {}


def test_a_node_watch_follows_additions_deletions_and_cordons() -> None:
    fake, cache = _cluster()
    fake.add_node(node("n3", "b", "r2"))
    fake.delete_node("n0")
    fake.update_node("n1", lambda n: n["spec"].update(unschedulable=True))
    before = cache.generation
    assert cache.poll_nodes(0) == 3
    assert sorted(cache.nodes) == ["n1", "n2", "n3"]
    assert cache.nodes["n1"]["spec"]["unschedulable"] is True
    assert cache.generation > before


def test_a_heartbeat_does_not_count_as_a_change() -> None:
    """5,000 nodes report status all the time; only what placement reads may trigger a rebuild."""
    fake, cache = _cluster()

    def heartbeat(n: dict[str, Any]) -> None:
        n["status"]["conditions"][0]["lastHeartbeatTime"] = "2026-12-01T00:00:00Z"

    fake.update_node("n2", heartbeat)
    before = cache.generation
    assert cache.poll_nodes(0) == 1
    assert cache.nodes["n2"]["status"]["conditions"][0]["lastHeartbeatTime"]
    assert cache.generation == before
    fake.update_node("n2", lambda n: n["metadata"]["labels"].update(rack="r9"))
    cache.poll_nodes(0)
    assert cache.generation > before


def test_an_expired_node_watch_lists_the_nodes_again(monkeypatch: pytest.MonkeyPatch) -> None:
    fake, cache = _cluster()
    fake.delete_node("n0")

    def expired(**_: Any) -> Iterator[WatchEvent]:
        raise WatchExpired("watch nodes", 410, "too old resource version")
        yield  # pragma: no cover

    monkeypatch.setattr(fake, "watch_nodes", expired)
    assert cache.poll_nodes(0) == 1
    assert sorted(cache.nodes) == ["n1", "n2"]


def test_an_expired_pod_watch_resyncs(monkeypatch: pytest.MonkeyPatch) -> None:
    fake, cache = _cluster()
    fake.add_pod(redis_pod("r-1", "c", 0, "replica"))

    def expired(**_: Any) -> Iterator[WatchEvent]:
        raise WatchExpired("watch pods", 410, "too old resource version")
        yield  # pragma: no cover

    monkeypatch.setattr(fake, "watch_pods", expired)
    assert cache.poll(0) == 1
    assert set(cache.pods) == {("default", "r-0"), ("default", "r-1")}


def test_the_echo_of_an_assumed_binding_changes_nothing_a_decision_reads() -> None:
    """Our own binding coming back through the watch must not wake the loop to rebuild."""
    fake, cache = _cluster()
    fake.add_pod(redis_pod("r-1", "c", 0, "replica"))
    cache.poll(0)
    uid = cache.pods[("default", "r-1")]["metadata"]["uid"]
    assert cache.assume(("default", "r-1"), uid, "n2", {"redis-placer.io/role": "replica"})
    assert cache.pods[("default", "r-1")]["spec"]["nodeName"] == "n2"
    assumed_at = cache.generation
    # The Binding carries the annotations the assumption added, as the binder writes it.
    assert fake.bind_pod("default", "r-1", uid, "n2", {"redis-placer.io/role": "replica"}).ok
    woken: list[int] = []
    assert cache.poll(0, on_event=lambda: woken.append(1)) == 1
    assert woken == [] and cache.generation == assumed_at
    assert cache._assumed == {} and cache.pods[("default", "r-1")]["spec"]["nodeName"] == "n2"
    # Anything else about a pod still counts: a label, or a binding to another node.
    fake.patch_pod_labels("default", "r-1", {"extra": "yes"})
    assert cache.poll(0, on_event=lambda: woken.append(1)) == 1 and woken == [1]


def test_a_watch_begun_before_a_list_gives_way_to_one_from_the_lists_version(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """client-go's reflector: list, then watch from the list's version. A pod created after the
    list was read but applied by the old watch before the list replaced the cache would be lost
    if that old watch kept going; it stops, and the new watch brings the pod again."""
    fake, cache = _cluster()
    listed_at_v1 = fake.list_pods_with_version()  # the list is read ...
    b = WatchEvent("ADDED", fake.add_pod(redis_pod("r-b", "c", 1, "master")))
    c = WatchEvent("ADDED", fake.add_pod(redis_pod("r-c", "c", 1, "replica")))
    before_list = cache._pod_list
    assert cache.apply(b, before_list)  # ... the running watch applies b ...
    monkeypatch.setattr(fake, "list_pods_with_version", lambda namespace=None: listed_at_v1)
    cache.resync()  # ... and then the list, without b, replaces the cache
    monkeypatch.undo()
    assert ("default", "r-b") not in cache.pods
    with pytest.raises(_Relisted):
        cache.apply(c, before_list)  # the old watch must not carry on past the list
    assert ("default", "r-c") not in cache.pods
    assert cache.poll(0) == 2  # a new watch from the list's version brings both
    assert {("default", "r-b"), ("default", "r-c")} <= set(cache.pods)


def test_a_binding_to_the_assumed_node_without_our_annotations_is_a_change() -> None:
    """Someone else bound the pod where we assumed it: what the snapshot read (our role
    annotation) is not what the server holds, so it counts."""
    fake, cache = _cluster()
    fake.add_pod(redis_pod("r-1", "c", 0, "replica"))
    cache.poll(0)
    uid = cache.pods[("default", "r-1")]["metadata"]["uid"]
    assert cache.assume(("default", "r-1"), uid, "n2", {"redis-placer.io/role": "master"})
    assumed_at = cache.generation
    assert fake.bind_pod("default", "r-1", uid, "n2").ok
    woken: list[int] = []
    assert cache.poll(0, on_event=lambda: woken.append(1)) == 1
    assert woken == [1] and cache.generation > assumed_at
    pod = cache.pods[("default", "r-1")]
    assert "redis-placer.io/role" not in (pod["metadata"].get("annotations") or {})
    assert cache._assumed == {}
