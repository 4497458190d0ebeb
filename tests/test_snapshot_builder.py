"""The snapshot kept up to date pod by pod equals the snapshot built whole from the same
objects, after any sequence of changes: pods created, bound, relabelled, finished, deleted and
created again, unmanaged load, two masters in a shard, pods bound to nodes that are gone, claims
without volume objects, a node or a StatefulSet changing."""

import copy
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from models.kube_objects import ParseCache, build_snapshot
from models.policy import Policy
from models.snapshot import Snapshot
from models.snapshot_builder import SnapshotBuilder
from tests.kube_dicts import node, other_pod, redis_pod

NODES = [node(f"n{i}", f"z{i % 3}", f"r{i % 4}") for i in range(6)]
NAMES = [f"p{i}" for i in range(10)]
Key = tuple[str, str]


def _whole(
    nodes: dict[str, Any], pods: dict[Key, Any], sets: list[Any], policy: Policy
) -> Snapshot:
    """The reference: ``build_snapshot`` on a parse cache of its own, in the builder's order."""
    objects = [
        *(nodes[n] for n in sorted(nodes)),
        *(pods[k] for k in sorted(pods)),
        *sets,
    ]
    return build_snapshot(objects, policy, ParseCache())


def _statefulset(replicas: int, version: int) -> dict[str, Any]:
    return {
        "kind": "StatefulSet",
        "metadata": {"name": "set", "namespace": "default", "resourceVersion": str(version)},
        "spec": {"replicas": replicas},
    }


class World:
    """Objects as a watch cache holds them: each change is a new object with a new version."""

    def __init__(self) -> None:
        self.version = 1
        self.nodes = {n["metadata"]["name"]: n for n in NODES}
        self.pods: dict[Key, Any] = {}
        self.sets: list[Any] = []

    def stamp(self, obj: dict[str, Any], uid: str | None = None) -> dict[str, Any]:
        self.version += 1
        obj["metadata"]["resourceVersion"] = str(self.version)
        if uid is not None:
            obj["metadata"]["uid"] = uid
        return obj

    def apply(self, event: tuple[Any, ...]) -> set[Key]:
        kind, name = event[0], event[1]
        key = ("default", name) if kind != "other" else ("other", name)
        current = self.pods.get(key)
        if kind == "create":
            shard, role, bound, claims = event[2:]
            pod = redis_pod(name, "c", shard, role, node=bound)
            if claims:
                pod["spec"]["volumes"] = [
                    {"name": "data", "persistentVolumeClaim": {"claimName": f"data-{name}"}}
                ]
            if current is not None:
                return set()
            self.pods[key] = self.stamp(pod, uid=f"{name}-{self.version}")
        elif kind == "other":
            if current is None:
                self.pods[key] = self.stamp(other_pod(name, event[2], "1", "1Gi"), uid=name)
        elif current is None:
            return set()
        elif kind == "bind":
            pod = copy.deepcopy(current)
            pod["spec"]["nodeName"] = event[2]
            pod["status"] = {"phase": "Running", "podIP": "10.0.0.1"}
            pod["metadata"].setdefault("annotations", {})["redis-placer.io/role"] = "master"
            self.pods[key] = self.stamp(pod)
        elif kind == "role":
            pod = copy.deepcopy(current)
            labels = pod["metadata"]["labels"]
            if event[2] is None:
                labels.pop("redis-role", None)
            else:
                labels["redis-role"] = event[2]
            self.pods[key] = self.stamp(pod)
        elif kind == "finish":
            pod = copy.deepcopy(current)
            pod["status"] = {"phase": "Succeeded"}
            self.pods[key] = self.stamp(pod)
        elif kind == "delete":
            del self.pods[key]
        return {key}

    def change_node(self, i: int) -> None:
        name = f"n{i}"
        if name in self.nodes and i % 2:
            del self.nodes[name]  # pods bound there are counted as lost
        else:
            fresh = node(name, None if i % 3 == 0 else f"z{i % 3}", f"r{i}")
            self.nodes[name] = self.stamp(fresh)

    def change_sets(self, replicas: int) -> None:
        self.sets = [self.stamp(_statefulset(replicas, 0))]


nodes_ = st.sampled_from([*(f"n{i}" for i in range(6)), "gone"])
pod_events = st.one_of(
    st.tuples(
        st.just("create"),
        st.sampled_from(NAMES),
        st.sampled_from(["0", "1", "2"]),
        st.sampled_from([None, "master", "replica"]),
        st.one_of(st.none(), nodes_),
        st.booleans(),
    ),
    st.tuples(st.just("bind"), st.sampled_from(NAMES), nodes_),
    st.tuples(st.just("role"), st.sampled_from(NAMES), st.sampled_from([None, "master"])),
    st.tuples(st.sampled_from(["finish", "delete"]), st.sampled_from(NAMES)),
    st.tuples(st.just("other"), st.sampled_from(["o1", "o2"]), nodes_),
)
events = st.one_of(
    pod_events,
    st.tuples(st.just("node"), st.integers(0, 5)),
    st.tuples(st.just("sets"), st.integers(1, 4)),
)


@settings(max_examples=150, deadline=None)
@given(st.lists(events, min_size=1, max_size=40), st.booleans())
def test_built_pod_by_pod_equals_built_whole(sequence: list[Any], told: bool) -> None:
    """``told``: the caller names the changed pods, as the binder does; otherwise the builder
    finds them by identity."""
    policy = Policy()
    world = World()
    builder = SnapshotBuilder(policy, ParseCache())
    builder.build(world.nodes, world.pods, world.sets)
    for event in sequence:
        changed: set[Key] = set()
        if event[0] == "node":
            world.change_node(event[1])
        elif event[0] == "sets":
            world.change_sets(event[1])
        else:
            changed = world.apply(event)
        built = builder.build(
            world.nodes, world.pods, world.sets, changed=changed if told else None
        )
        assert built == _whole(world.nodes, world.pods, world.sets, policy)
    assert builder.whole_builds >= 1


def test_a_pod_event_is_not_a_whole_build() -> None:
    world = World()
    builder = SnapshotBuilder(Policy(), ParseCache())
    first = builder.build(world.nodes, world.pods, world.sets)
    for i, name in enumerate(NAMES):
        changed = world.apply(("create", name, str(i // 3), None, None, False))
        built = builder.build(world.nodes, world.pods, world.sets, changed=changed)
        # The nodes did not change: the same tuple, which caches keyed on it recognise.
        assert built.nodes is first.nodes
    for i, name in enumerate(NAMES):
        changed = world.apply(("bind", name, f"n{i % 6}"))
        built = builder.build(world.nodes, world.pods, world.sets, changed=changed)
    assert builder.whole_builds == 1
    assert builder.incremental_builds == 2 * len(NAMES)
    assert built == _whole(world.nodes, world.pods, world.sets, Policy())
    bound = {m.pod.node_name for m in (*built.members, *built.skipped_members)}
    assert bound == {f"n{i}" for i in range(6)}


def test_a_fresh_list_of_unchanged_statefulsets_is_not_a_change() -> None:
    """The binder lists StatefulSets again every 30 s: the same versions are the same sets."""
    world = World()
    world.change_sets(3)
    builder = SnapshotBuilder(Policy(), ParseCache())
    builder.build(world.nodes, world.pods, world.sets)
    changed = world.apply(("create", "p0", "0", None, None, False))
    relisted = copy.deepcopy(world.sets)
    built = builder.build(world.nodes, world.pods, relisted, changed=changed)
    assert (builder.whole_builds, builder.incremental_builds) == (1, 1)
    assert built == _whole(world.nodes, world.pods, relisted, Policy())
    world.change_sets(4)  # a new version: read whole
    builder.build(world.nodes, world.pods, world.sets, changed=set())
    assert builder.whole_builds == 2
