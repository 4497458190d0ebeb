"""The binder reads its snapshot from the pods the watch changed (and its own pending ones), not
from every pod; after any sequence of watch events, assumptions, pins and gates it equals the
snapshot a reader that has never seen the cluster builds whole from the same cache."""

import gc
from typing import Any

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from models.kube_objects import ParseCache
from models.policy import Policy
from placer.binder.cache import PodKey
from placer.binder.config import PLACEMENT_GATE, BinderConfig
from placer.binder.loop import Binder
from placer.binder.reading import Reader
from placer.kube.fake import FakeKubeAdapter
from placer.kube.objects import NODE_NAME_FIELD
from tests.kube_dicts import node, other_pod, redis_pod

NAMES = [f"r{i}" for i in range(8)]
NODES = [f"n{i}" for i in range(5)]


def _fresh_read(binder: Binder) -> Any:
    """What a reader with nothing kept (a new parse cache, a new builder) reads now."""
    reader = Reader(
        binder.adapter,
        binder.policy,
        binder.config,
        binder.cache,
        ParseCache(),
        binder.refusals,
        lambda *args, **kwargs: None,
        lambda key: None,
    )
    return reader.read()


def _pod(name: str, shard: int, enforce: str, pinned: str | None) -> dict[str, Any]:
    extra: dict[str, Any] = {}
    if enforce == "bind":
        extra["schedulerName"] = "redis-placer"
    elif pinned is None:
        extra["schedulingGates"] = [{"name": PLACEMENT_GATE}]
    else:
        extra["affinity"] = {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [
                        {
                            "matchFields": [
                                {"key": NODE_NAME_FIELD, "operator": "In", "values": [pinned]}
                            ]
                        }
                    ]
                }
            }
        }
    return redis_pod(name, "c", shard, None, **extra)


operations = st.lists(
    st.one_of(
        st.tuples(
            st.just("create"),
            st.sampled_from(NAMES),
            st.integers(0, 2),
            st.one_of(st.none(), st.sampled_from(NODES)),
        ),
        st.tuples(st.just("bind"), st.sampled_from(NAMES), st.sampled_from(NODES)),
        st.tuples(st.just("assume"), st.sampled_from(NAMES), st.sampled_from(NODES)),
        st.tuples(st.just("forget"), st.sampled_from(NAMES)),
        st.tuples(st.just("label"), st.sampled_from(NAMES), st.sampled_from(["master", None])),
        st.tuples(st.just("delete"), st.sampled_from(NAMES)),
        st.tuples(st.just("other"), st.sampled_from(["o1", "o2"]), st.sampled_from(NODES)),
        st.tuples(st.just("quiet")),
        st.tuples(st.just("resync")),
    ),
    min_size=1,
    max_size=30,
)


@pytest.mark.parametrize("enforce", ["bind", "gate"])
@settings(max_examples=60, deadline=None)
@given(steps=operations)
@example(  # someone else binds a pod to the node we assumed, without our role annotation
    steps=[("create", "r1", 0, None), ("assume", "r1", "n0"), ("bind", "r1", "n0")]
)
def test_the_binders_snapshot_equals_one_read_whole(enforce: str, steps: list[Any]) -> None:
    fake = FakeKubeAdapter(nodes=[node(n, f"z{i % 3}", f"r{i}") for i, n in enumerate(NODES)])
    binder = Binder(fake, Policy(), BinderConfig(enforce=enforce))  # type: ignore[arg-type]
    binder.cache.resync()
    binder.reader.read()
    for step in steps:
        kind = step[0]
        key: PodKey = ("default", step[1]) if len(step) > 1 else ("", "")
        pod = fake.pods.get(key)
        if kind == "create" and pod is None:
            fake.add_pod(_pod(step[1], step[2], enforce, step[3]))
        elif kind == "bind" and pod is not None and not pod["spec"].get("nodeName"):
            fake.bind_pod("default", step[1], None, step[2])
        elif (
            kind == "assume" and key in binder.cache.pods and binder.is_ours(binder.cache.pods[key])
        ):
            # The binder assumes only the pods it placed: its own pending ones (a pinned pod
            # is kube-scheduler's; the cache's assumed view of it would share the pinned
            # view's parse key, uid and resourceVersion at the same node).
            uid = binder.cache.pods[key]["metadata"]["uid"]
            binder.cache.assume(key, uid, step[2], {"redis-placer.io/role": "master"})
        elif kind == "forget":
            binder.cache.forget_assumed(key)
        elif kind == "label" and pod is not None:
            fake.patch_pod_labels("default", step[1], {"redis-role": step[2]})
        elif kind == "delete" and pod is not None:
            fake.delete_pod("default", step[1])
        elif kind == "other" and ("other", step[1]) not in fake.pods:
            fake.add_pod(other_pod(step[1], step[2], "1", "1Gi"))
        elif kind == "resync":
            binder.cache.resync()
        binder.cache.poll(0)
        if kind == "quiet":
            continue  # several changes between two reads
        read = binder.reader.read()
        assert read == _fresh_read(binder)
    assert binder.reader.builder.incremental_builds + binder.reader.builder.whole_builds >= 1


def test_a_read_leaves_the_collector_nothing_young_to_walk() -> None:
    """The objects a build makes are all kept (the snapshot, its members, the parsed pods), so
    they are settled before the collector comes back on: otherwise its first allocation after
    that starts a collection walking every one of them, to free nothing."""
    pods = [
        redis_pod(f"c-{s}-{i}", "c", s, None, schedulerName="redis-placer")
        for s in range(200)
        for i in range(3)
    ]
    fake = FakeKubeAdapter(
        nodes=[node(f"n{i}", f"z{i % 3}", f"r{i}") for i in range(60)], pods=pods
    )
    binder = Binder(fake, Policy(), BinderConfig())
    binder.cache.resync()
    started: list[int] = []

    def note(phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            started.append(info["generation"])

    gc.callbacks.append(note)
    try:
        snapshot = binder.reader.read()[0]
    finally:
        gc.callbacks.remove(note)
        gc.unfreeze()
    assert len([m for m in snapshot.members if m.pod.pending]) == 600  # a read worth settling
    assert started == []
