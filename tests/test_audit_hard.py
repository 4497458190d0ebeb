"""The audit sees every hard problem of a running cluster, including those no plan can see."""

from typing import Any

from models.plan import Violation
from models.policy import Policy
from models.snapshot import Snapshot
from solver import check
from solver.check import keep_plan, master_quorum_warnings, standing_violations
from tests.kube_dicts import node, redis_pod, snapshot

QUIET = Policy.model_validate(
    {"rules": {"replicaSeparation": {"rack": "ignore", "zone": "ignore"}}}
)


def audit(snap: Snapshot, policy: Policy) -> list[Violation]:
    """The audit without its soft survival findings: a one-shard cluster loses its only master
    with one host whatever runs where (tests/test_check.py covers those findings)."""
    return [v for v in check.audit(snap, policy) if (v.rule, v.severity) != ("survive", "soft")]


def test_a_shard_running_two_masters_is_a_hard_violation() -> None:
    snap = snapshot(
        [node("n1", "a", "a1"), node("n2", "b", "b1")],
        [
            redis_pod("r-0-0", "r", 0, "master", node="n1"),
            redis_pod("r-0-1", "r", 0, "master", node="n2"),
        ],
    )
    [violation] = audit(snap, QUIET)
    assert (violation.rule, violation.severity) == ("shard-roles", "hard")
    assert violation.pods == ["default/r-0-0", "default/r-0-1"]
    assert violation.nodes == ["n1", "n2"]
    assert "shard default/r/0 runs 2 masters" in violation.message


def test_two_labelled_masters_of_which_one_is_pending_are_an_input_issue_only() -> None:
    """Only running masters make the cluster wrong; a pending pod's label is an input error."""
    snap = snapshot(
        [node("n1", "a", "a1"), node("n2", "b", "b1")],
        [redis_pod("r-0-0", "r", 0, "master", node="n1"), redis_pod("r-0-1", "r", 0, "master")],
    )
    assert audit(snap, QUIET) == []
    assert any(i.severity == "error" and "2 masters" in i.message for i in snap.issues)


def noexecute_cluster(
    toleration: dict[str, str] | None = None, effect: str = "NoExecute"
) -> Snapshot:
    extra: dict[str, Any] = {"tolerations": [toleration]} if toleration else {}
    return snapshot(
        [node("n1", "a", "a1", taints=[f"maintenance=now:{effect}"]), node("n2", "b", "b1")],
        [
            redis_pod("r-0-0", "r", 0, "master", node="n1", **extra),
            redis_pod("r-0-1", "r", 0, "replica", node="n2"),
        ],
    )


def test_a_running_pod_on_a_noexecute_taint_it_does_not_tolerate_is_hard() -> None:
    snap = noexecute_cluster()
    [violation] = audit(snap, QUIET)
    assert (violation.rule, violation.severity) == ("fits", "hard")
    assert violation.pods == ["default/r-0-0"] and violation.nodes == ["n1"]
    assert "maintenance=now:NoExecute" in violation.message and "evicts" in violation.message
    assert standing_violations(snap, keep_plan(snap)) == [violation]


def test_a_tolerated_noexecute_taint_is_no_violation() -> None:
    snap = noexecute_cluster({"key": "maintenance", "operator": "Exists", "effect": "NoExecute"})
    assert audit(snap, QUIET) == []


def test_a_noschedule_taint_after_binding_leaves_the_pod_running() -> None:
    """Kubernetes does not evict for NoSchedule: at risk (soft), said in words, not hard."""
    violations = audit(noexecute_cluster(effect="NoSchedule"), QUIET)
    assert [(v.rule, v.severity) for v in violations] == [("fits", "soft")]
    assert "leaves it running" in violations[0].message
    assert "maintenance=now:NoSchedule" in violations[0].message


def test_nodes_without_zone_labels_are_not_one_shared_zone() -> None:
    """Two nodes missing the label are not known to share a zone: no separation pair."""
    snap = snapshot(
        [node("n1", "a", "a1"), node("n2", None, "b1"), node("n3", None, "c1")],
        [
            redis_pod("r-0-0", "r", 0, "master", node="n2"),
            redis_pod("r-0-1", "r", 0, "replica", node="n3"),
        ],
    )
    assert not [v for v in audit(snap, Policy()) if v.rule == "replica-separation"]


def three_shards(count: int, survive: str = "none") -> tuple[Snapshot, Policy]:
    pods = [redis_pod(f"r-{s}-0", "r", s, None) for s in range(count)]
    policy = Policy.model_validate({"rules": {"survive": survive}})
    return snapshot([node("n1", "a", "a1")], pods, policy), policy


def test_fewer_than_three_masters_is_a_warning() -> None:
    snap, policy = three_shards(2)
    [warning] = master_quorum_warnings(snap, policy)
    assert warning.startswith("Redis cluster default/r has 2 shards, so 2 masters")
    assert "at least 3 masters to fail over on its own" in warning
    assert "survive" not in warning


def test_with_survive_zone_two_masters_can_never_keep_a_majority() -> None:
    snap, policy = three_shards(2, "zone")
    [warning] = master_quorum_warnings(snap, policy)
    assert "with survive: zone, 2 masters can never keep a majority after losing one" in warning


def test_three_masters_need_no_warning() -> None:
    snap, policy = three_shards(3, "zone")
    assert master_quorum_warnings(snap, policy) == []
