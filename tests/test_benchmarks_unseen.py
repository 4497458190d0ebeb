"""benchmarks/unseen.py's clusters read as the plan command reads them."""

from collections import Counter

from benchmarks.unseen import unseen_cluster
from models.kube_objects import build_snapshot
from models.policy import Policy


def test_shards_dealt_round_to_many_redis_clusters() -> None:
    document = unseen_cluster(5, nodes=40, racks=6, shards=12, redis_clusters=4)
    snap = build_snapshot(document["items"], Policy())
    shards = Counter(m.cluster for m in snap.pending)
    assert len(snap.nodes) == 40
    assert len(snap.pending) == 36
    assert sorted(shards.values()) == [9, 9, 9, 9]  # 3 shards of 3 pods in each


def test_one_redis_cluster_by_default() -> None:
    snap = build_snapshot(unseen_cluster(5, nodes=40, racks=6, shards=4)["items"], Policy())
    assert {m.cluster for m in snap.pending} == {"cache/orders"}
