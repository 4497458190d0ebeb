"""The guard inside the binder's process reads nodes, pods and StatefulSets from the binder's
watch cache: no list per reading while the cache is readable, the same view (and so the same
decisions) as the lists would give, and, while the cache is unreadable, lists of its own and the
guard's unreadable path (it lets requests through) when those fail too.

Every step is driven by hand with a clock of the test's own: the watches are polled, never
waited for.
"""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING, Any

import pytest

from models.policy import Policy
from placer.binder.cache import ClusterCache
from placer.binder.loop import Binder, BinderConfig
from placer.binder.shared import CachedObjects
from placer.kube.adapter import KubeApiError
from placer.kube.fake import FakeKubeAdapter
from placer.kube.source import ListedObjects
from placer.maintenance.guard import Guard
from placer.maintenance.reading import GuardView, read_guard_view
from solver.handover import MemberHealth, judge_disruption
from tests.kube_dicts import node, other_pod, redis_pod
from tests.test_live import owned_pod, statefulset

if TYPE_CHECKING:
    from tests.redis_harness import RedisClusterHarness

pytest_plugins = ["tests.redis_harness"]

REDIS_PORT = 6379
ZONES = ("a", "b", "c")


class Counting(FakeKubeAdapter):
    """The fake API server, counting the lists it answers (by resource) and able to be down."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.lists: Counter[str] = Counter()
        self.down = False
        self._inside = False

    def _list(self, what: str, call: Any, *args: Any, **kwargs: Any) -> Any:
        if self._inside:  # the fake's own calls between its list methods are one request
            return call(*args, **kwargs)
        if self.down:
            raise KubeApiError(f"list {what}", 0, "connection refused")
        self.lists[what] += 1
        self._inside = True
        try:
            return call(*args, **kwargs)
        finally:
            self._inside = False

    def list_nodes(self, *args: Any, **kwargs: Any) -> Any:
        return self._list("nodes", super().list_nodes, *args, **kwargs)

    def list_nodes_with_version(self, *args: Any, **kwargs: Any) -> Any:
        return self._list("nodes", super().list_nodes_with_version, *args, **kwargs)

    def list_pods(self, *args: Any, **kwargs: Any) -> Any:
        return self._list("pods", super().list_pods, *args, **kwargs)

    def list_pods_with_version(self, *args: Any, **kwargs: Any) -> Any:
        return self._list("pods", super().list_pods_with_version, *args, **kwargs)

    def list_statefulsets(self, *args: Any, **kwargs: Any) -> Any:
        return self._list("statefulsets", super().list_statefulsets, *args, **kwargs)

    def watch_pods(self, *args: Any, **kwargs: Any) -> Any:
        if self.down:
            raise KubeApiError("watch pods", 0, "connection refused")
        return super().watch_pods(*args, **kwargs)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _cluster(**kwargs: Any) -> Counting:
    """Nine nodes in three zones, three shards of a master and a replica in other zones, a pod
    that is not Redis, and a pod of another namespace."""
    nodes = [node(f"{z}{i}", f"zone-{z}", f"zone-{z}-r{i}", pods=10) for z in ZONES for i in (0, 1)]
    pods = [other_pod("web-0", "a1", "100m", "128Mi")]
    for shard in range(3):
        for suffix, role, where in (
            ("m", "master", f"{ZONES[shard]}0"),
            ("r", "replica", f"{ZONES[(shard + 1) % 3]}1"),
        ):
            pod = redis_pod(f"s{shard}-{suffix}", "cache", shard, role, node=where)
            pod["status"]["conditions"] = [{"type": "Ready", "status": "True"}]
            pods.append(pod)
    pods.append(redis_pod("t0-m", "other", 0, "master", node="c1", namespace="team"))
    return Counting(nodes=nodes, pods=pods, **kwargs)


def _binder(fake: Counting, clock: Clock, namespace: str | None = None) -> Binder:
    """A binder whose cache has made its first list, as ``Binder.run`` does before anything."""
    binder = Binder(fake, Policy(), BinderConfig(namespace=namespace))
    binder.cache.clock = clock
    binder.cache.resync()
    return binder


def _cached(binder: Binder) -> CachedObjects:
    return CachedObjects(binder.cache, ListedObjects(binder.adapter))


def _follow(cache: ClusterCache) -> None:
    """What the binder's watch threads do, once: apply the changes since the last version."""
    cache.poll_nodes(0)
    cache.poll(0)


def _shape(view: GuardView) -> dict[str, Any]:
    """Everything of a view the guard decides from, besides Redis's answers."""
    return {
        "members": sorted(
            (m.key, m.shard_key, m.role, m.pod.node_name, m.pod.pending, m.shard_size)
            for m in view.snapshot.members
        ),
        "skipped": sorted(m.key for m in view.snapshot.skipped_members),
        "nodes": sorted(n.name for n in view.snapshot.nodes),
        "going": view.going_nodes,
        "deleting": view.deleting,
        "pods": view.pods,
        "health": view.health,
    }


def _decisions(view: GuardView, policy: Policy) -> dict[str, tuple[str, str]]:
    """The guard's verdict on a disruption of each member, every member serving and in sync."""
    health = {m.key: MemberHealth(True, True) for m in view.snapshot.members}
    out: dict[str, tuple[str, str]] = {}
    for m in view.snapshot.members:
        verdict = judge_disruption(
            view.snapshot, policy, m.key, health, view.going_pods() | {m.key}
        )
        out[m.key] = (verdict.kind, verdict.reason)
    return out


def test_the_guard_in_the_binders_process_lists_nothing_while_the_cache_is_readable() -> None:
    """60 rounds of 2 s on a leader and a standby, an admission in each (its reading 1.5 s
    old: read again): 180 readings, no node or pod list, the StatefulSets listed every 30 s.
    A guard that lists: three lists a reading, every node in one of them."""
    clock = Clock()
    fake = _cluster()
    binder = _binder(fake, clock)
    fake.lists.clear()
    sources = [_cached(binder), _cached(binder)]
    leader, standby = (
        Guard(fake, Policy(), port=REDIS_PORT, objects=source, clock=clock) for source in sources
    )
    for _ in range(60):
        clock.now += 1.5
        standby.admit("default", "s2-r", dry_run=True)
        clock.now += 0.5
        _follow(binder.cache)
        leader.step(leading=True)
        standby.step(leading=False)
    assert sum(source.served for source in sources) == 180
    assert sum(source.listed for source in sources) == 0
    assert fake.lists == Counter(statefulsets=4)  # at 30, 60, 90 and 120 s, shared by both

    listing = Guard(fake, Policy(), port=REDIS_PORT, clock=clock)
    fake.lists.clear()
    for _ in range(60):
        clock.now += 1.5
        listing.admit("default", "s2-r", dry_run=True)
        clock.now += 0.5
        listing.step(leading=True)
    assert fake.lists == Counter(nodes=120, pods=120, statefulsets=120)


def test_a_cached_view_is_the_listed_view_and_decides_the_same() -> None:
    """The same objects from the cache and from lists: the same snapshot, nodes going, pods
    being deleted, pod objects, and the same verdict on each member; the changes the watches
    bring (a cordon, a new pod, a label) included, and a pod the binder has only assumed on a
    node still pending, as the server has it."""
    clock = Clock()
    fake = _cluster()
    binder = _binder(fake, clock)
    cached = _cached(binder)
    policy = Policy()
    fake.cordon_node("b0")  # holds s1-m
    disrupted = [{"key": "karpenter.sh/disrupted", "effect": "NoSchedule"}]
    fake.update_node("c0", lambda n: n["spec"].update(taints=disrupted))
    going = redis_pod("s0-x", "cache", 0, "replica", node="c1")
    going["metadata"]["deletionTimestamp"] = "2025-01-01T00:00:00Z"
    fake.add_pod(going)
    fake.add_pod(redis_pod("s2-x", "cache", 2, None))  # pending
    fake.patch_pod_labels("default", "s2-r", {"tier": "gold"})
    _follow(binder.cache)
    assert binder.cache.assume(("default", "s2-x"), "", "a1")
    assert binder.cache.pods[("default", "s2-x")]["spec"]["nodeName"] == "a1"
    listed = read_guard_view(fake, policy, port=REDIS_PORT)
    fake.lists.clear()
    from_cache = read_guard_view(fake, policy, port=REDIS_PORT, objects=cached)
    assert fake.lists == Counter()
    assert _shape(from_cache) == _shape(listed)
    assert from_cache.going_nodes == {"b0", "c0"}
    assert from_cache.deleting == {"default/s0-x"}
    assert "team/t0-m" in from_cache.pods and "default/web-0" not in from_cache.pods
    assert from_cache.pods["default/s2-r"]["metadata"]["labels"]["tier"] == "gold"
    assert next(m for m in from_cache.snapshot.members if m.key == "default/s2-x").pod.pending
    assert _decisions(from_cache, policy) == _decisions(listed, policy)


def test_an_unreadable_cache_is_never_decided_from() -> None:
    """A lost cache (a watch broke): each reading lists for itself and sees what the watch
    missed; with the lists failing too, the guard's unreadable path: admissions let through
    with a warning, no step acts. Listed again, the cache serves again. A cache not yet listed
    (the guard starts before the binder's first list) is unreadable too."""
    clock = Clock()
    fake = _cluster()
    binder = Binder(fake, Policy(), BinderConfig())
    binder.cache.clock = clock
    objects = _cached(binder)
    guard = Guard(fake, Policy(), port=REDIS_PORT, objects=objects, clock=clock)
    guard.step(leading=True)
    assert fake.lists == Counter(nodes=1, pods=1, statefulsets=1)  # not listed yet: lists
    binder.cache.resync()
    fake.lists.clear()
    clock.now += 2.0
    guard.step(leading=True)
    assert fake.lists == Counter()

    fake.down = True
    binder.cache.lose("pod-watch failed: connection refused")
    fake.down = False
    fake.cordon_node("a0")  # the cache, lost, does not follow it
    clock.now += 2.0
    guard.step(leading=False)
    assert fake.lists == Counter(nodes=1, pods=1, statefulsets=1)
    assert (objects.listed, objects.served) == (2, 1)
    assert guard._view is not None and guard._view.going_nodes == {"a0"}
    assert "a0" not in {
        n["metadata"]["name"] for n in binder.cache.nodes.values() if n["spec"].get("unschedulable")
    }

    fake.down = True
    clock.now += 2.0
    answer = guard.admit("default", "s0-m")
    assert answer.allowed
    assert answer.warnings == ("redis-placer guard cannot read the cluster: let through unchecked",)
    assert guard.step(leading=True) == [] and "connection refused" in guard.last_error

    fake.down = False
    binder.cache.resync()
    fake.lists.clear()
    clock.now += 2.0
    guard.step(leading=True)
    assert fake.lists == Counter() and guard._view is not None
    assert guard._view.going_nodes == {"a0"}


def test_statefulsets_are_listed_when_old_or_an_owner_is_new() -> None:
    """No watch follows StatefulSets and a standby's binder never lists them: read from the
    cache, they are listed again after 30 s (a scaled one changes its shards' size), and at once,
    once, for an owner the cache lacks."""
    clock = Clock()
    nodes = [node(f"n{i}", f"zone-{i}", f"r{i}") for i in range(3)]
    fake = Counting(
        nodes=nodes,
        pods=[owned_pod(f"db-{i}", 0, "db") for i in range(2)],  # pending
        statefulsets=[statefulset("db", 2)],
    )
    binder = _binder(fake, clock)
    cached = _cached(binder)
    policy = Policy()

    def sizes() -> set[int | None]:
        view = read_guard_view(fake, policy, port=REDIS_PORT, objects=cached)
        return {m.shard_size for m in view.snapshot.members}

    fake.lists.clear()
    assert sizes() == {2}
    fake.statefulsets[0]["spec"]["replicas"] = 3
    clock.now += 29.0
    assert sizes() == {2} and fake.lists == Counter()
    clock.now += 1.0
    assert sizes() == {3} and fake.lists == Counter(statefulsets=1)

    fake.lists.clear()
    fake.statefulsets.append(statefulset("kv", 1))
    fake.add_pod(owned_pod("kv-0", 1, "kv"))
    fake.add_pod(owned_pod("gone-0", 2, "gone"))  # its StatefulSet is gone
    _follow(binder.cache)
    clock.now += 1.0
    assert 1 in sizes()
    assert fake.lists == Counter(statefulsets=1)  # kv and gone at once: one list
    clock.now += 1.0
    sizes()
    assert fake.lists == Counter(statefulsets=1)  # gone is not listed for again


def test_a_binder_of_one_namespace_lends_its_nodes_only() -> None:
    """``binder -n``: its cache holds one namespace's pods; the guard keeps seeing every
    namespace's managed pods, listed (a selected list), and takes only the nodes from the cache."""
    clock = Clock()
    fake = _cluster()
    binder = _binder(fake, clock, namespace="default")
    cached = _cached(binder)
    listed = read_guard_view(fake, Policy(), port=REDIS_PORT)
    fake.lists.clear()
    view = read_guard_view(fake, Policy(), port=REDIS_PORT, objects=cached)
    assert fake.lists == Counter(pods=1, statefulsets=1)
    assert "team/t0-m" in view.pods
    assert _shape(view) == _shape(listed)


def test_the_guard_on_real_redis_decides_from_the_cache_as_from_lists(
    redis_cluster: RedisClusterHarness,
) -> None:
    """Roles and health from real Redis, objects from the cache: every admission answered as a
    guard that lists answers it, and a cordoned node's master handed over, with no list."""
    from tests.test_guard import _cluster as redis_layout

    h = redis_cluster
    plain, _ = redis_layout(h)
    clock = Clock()
    fake = Counting(nodes=list(plain.nodes.values()), pods=list(plain.pods.values()))
    binder = _binder(fake, clock)
    cached = Guard(fake, Policy(), port=h.port, objects=_cached(binder), restore=False)
    listing = Guard(fake, Policy(), port=h.port, restore=False)
    keys = sorted(name for _, name in fake.pods)
    fake.lists.clear()
    from_cache = [cached.admit("default", name, dry_run=True) for name in keys]
    assert fake.lists == Counter()
    assert from_cache == [listing.admit("default", name, dry_run=True) for name in keys]
    assert [a.allowed for a in from_cache] == [False, True] * 3  # masters wait for a handover

    fake.cordon_node("b0")  # holds s1-m
    _follow(binder.cache)
    fake.lists.clear()
    assert "handed default/s1-m -> default/s1-r" in cached.step(leading=True)
    assert fake.lists == Counter()


@pytest.mark.parametrize("readable", [True, False])
def test_readable_objects_are_the_servers_and_only_while_readable(readable: bool) -> None:
    fake = _cluster()
    cache = ClusterCache(fake)
    assert cache.readable_objects() is None  # never listed
    cache.resync()
    if not readable:
        cache.lose("node-watch failed")
        assert cache.readable_objects() is None
        return
    held = cache.readable_objects()
    assert held is not None
    assert len(held.nodes) == 6 and len(held.pods) == 8 and held.statefulsets == []
