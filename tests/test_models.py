"""Model invariants the rest of the code leans on."""

from models.kube_objects import build_snapshot, flatten
from models.policy import Policy
from models.synthetic import generate_cluster


def test_a_copied_snapshot_answers_from_its_own_members() -> None:
    """``shards`` and ``node_by_name`` are cached; a copy with other members must not reuse them."""
    snapshot = build_snapshot(flatten([generate_cluster(12, 4)]), Policy())
    assert len(snapshot.shards) == 4 and len(snapshot.node_by_name) == 12
    first = next(iter(snapshot.shards.values()))
    fewer = snapshot.model_copy(update={"members": tuple(first), "nodes": snapshot.nodes[:5]})
    assert list(fewer.shards) == [first[0].shard_key]
    assert sorted(fewer.node_by_name) == sorted(n.name for n in snapshot.nodes[:5])
    assert len(snapshot.shards) == 4  # the original keeps its own answers
