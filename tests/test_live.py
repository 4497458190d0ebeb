"""The live snapshot reads what the binder reads: nodes, pods and the StatefulSets that own them."""

from typing import Any

from models.policy import Policy
from placer.inputs.live import snapshot_from_adapter
from placer.kube.fake import FakeKubeAdapter
from tests.kube_dicts import node, redis_pod


def statefulset(name: str, replicas: int, namespace: str = "redis") -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": {"name": name, "namespace": namespace, "uid": f"uid-{name}"},
        "spec": {"replicas": replicas},
    }


def owned_pod(name: str, shard: int, owner: str, **extra: Any) -> dict[str, Any]:
    pod = redis_pod(name, "cache", shard, None, namespace="redis", **extra)
    pod["metadata"]["ownerReferences"] = [
        {
            "apiVersion": "apps/v1",
            "kind": "StatefulSet",
            "name": owner,
            "uid": f"uid-{owner}",
            "controller": True,
        }
    ]
    return pod


def sizes(fake: FakeKubeAdapter) -> dict[str, int | None]:
    return {m.key: m.shard_size for m in snapshot_from_adapter(fake, Policy()).members}


def test_shard_size_comes_from_the_owning_statefulset() -> None:
    fake = FakeKubeAdapter(
        nodes=[node("n1", "a", "a1"), node("n2", "b", "b1")],
        pods=[owned_pod("shard-0-0", 0, "shard-0"), owned_pod("shard-0-1", 0, "shard-0")],
        statefulsets=[statefulset("shard-0", 3)],
    )
    assert sizes(fake) == {"redis/shard-0-0": 3, "redis/shard-0-1": 3}


def test_the_annotation_wins_and_a_pod_without_either_has_no_size() -> None:
    annotated = owned_pod(
        "shard-0-0", 0, "shard-0", annotations={"redis-placer.io/shard-size": "2"}
    )
    orphan = redis_pod("loose-0", "cache", 1, None, namespace="redis")
    fake = FakeKubeAdapter(
        nodes=[node("n1", "a", "a1")],
        pods=[annotated, owned_pod("shard-0-1", 0, "shard-0"), orphan],
        # same name in another namespace: not the owner
        statefulsets=[statefulset("shard-0", 3), statefulset("shard-0", 5, namespace="other")],
    )
    assert sizes(fake) == {
        "redis/shard-0-0": 2,
        "redis/shard-0-1": 3,
        "redis/loose-0": None,
    }


def test_without_statefulsets_the_size_is_unknown() -> None:
    fake = FakeKubeAdapter(
        nodes=[node("n1", "a", "a1")],
        pods=[owned_pod("shard-0-0", 0, "shard-0")],
    )
    assert sizes(fake) == {"redis/shard-0-0": None}
