"""One tiny cluster per rule, where that rule alone decides the answer."""

from models.policy import Policy
from solver.check import check_plan
from solver.solve import SolveOptions, solve
from tests.kube_dicts import node, other_pod, redis_pod, snapshot

OPTS = SolveOptions(time_limit=10, workers=1)


def placed(plan, pod: str) -> str | None:
    return next(a.node for a in plan.assignments if a.pod == f"default/{pod}")


def role_of(plan, pod: str) -> str:
    return next(a.role for a in plan.assignments if a.pod == f"default/{pod}")


def test_fits_capacity_taints_selector_affinity_and_readiness() -> None:
    nodes = [
        node("small", "a", "a1", memory="1Gi"),
        node("tainted", "a", "a2", taints=["dedicated=db:NoSchedule"]),
        node("notready", "b", "b1", ready=False),
        node("cordoned", "b", "b2", unschedulable=True),
        node("good", "c", "c1", labels={"disk": "ssd"}),
    ]
    pods = [redis_pod("r-0-0", "r", 0, "master", memory="2Gi", nodeSelector={"disk": "ssd"})]
    plan = solve(snapshot(nodes, pods), Policy(), options=OPTS)
    assert placed(plan, "r-0-0") == "good"
    # A one-master cluster loses its master with any host: survival findings (soft), nothing else
    assert {(v.rule, v.severity) for v in plan.violations} == {("survive", "soft")}


def test_fits_capacity_counts_other_pods() -> None:
    nodes = [node("busy", "a", "a1", memory="4Gi"), node("free", "b", "b1", memory="4Gi", cpu="1")]
    pods = [
        other_pod("web", "busy", "100m", "3Gi"),
        redis_pod("r-0-0", "r", 0, "master", memory="2Gi"),
    ]
    plan = solve(snapshot(nodes, pods), Policy(), options=OPTS)
    assert placed(plan, "r-0-0") == "free"


def test_shard_spread_keeps_members_on_distinct_hosts() -> None:
    nodes = [node("n1", "a", "a1", memory="64Gi"), node("n2", "a", "a1", memory="2Gi")]
    pods = [redis_pod("r-0-0", "r", 0, "master"), redis_pod("r-0-1", "r", 0, "replica")]
    plan = solve(snapshot(nodes, pods), Policy(), options=OPTS)
    assert {placed(plan, "r-0-0"), placed(plan, "r-0-1")} == {"n1", "n2"}
    assert not [v for v in plan.violations if v.severity == "hard"]


def test_master_exclusivity_sends_second_master_elsewhere() -> None:
    nodes = [
        node("big", "a", "a1", memory="64Gi", cpu="32"),
        node("other", "b", "b1", memory="3Gi"),
    ]
    pods = [redis_pod("r-0-0", "r", 0, "master", node="big"), redis_pod("r-1-0", "r", 1, "master")]
    plan = solve(snapshot(nodes, pods), Policy(), options=OPTS)
    assert placed(plan, "r-1-0") == "other"


def test_master_exclusivity_cap_of_two_allows_sharing() -> None:
    nodes = [node("big", "a", "a1", memory="64Gi", cpu="32")]
    pods = [redis_pod("r-0-0", "r", 0, "master", node="big"), redis_pod("r-1-0", "r", 1, "master")]
    policy = Policy.model_validate(
        {"rules": {"maxMastersPerNode": 2}, "weights": {"masterBalance": 0}}
    )
    plan = solve(snapshot(nodes, pods), policy, options=OPTS)
    assert placed(plan, "r-1-0") == "big"


def test_replica_separation_preferred_picks_other_zone() -> None:
    nodes = [node("a1", "a", "ra"), node("a2", "a", "ra2"), node("b1", "b", "rb")]
    pods = [redis_pod("r-0-0", "r", 0, "master", node="a1"), redis_pod("r-0-1", "r", 0, "replica")]
    plan = solve(snapshot(nodes, pods), Policy(), options=OPTS)
    assert placed(plan, "r-0-1") == "b1"
    assert plan.objective_terms["zone"] == 0


def test_replica_separation_required_zone_leaves_replica_unplaced_when_impossible() -> None:
    nodes = [node("a1", "a", "ra"), node("a2", "a", "ra2")]
    pods = [redis_pod("r-0-0", "r", 0, "master", node="a1"), redis_pod("r-0-1", "r", 0, "replica")]
    policy = Policy.model_validate(
        {
            "rules": {"replicaSeparation": {"zone": "required"}},
            "degradation": {"relaxWhenInfeasible": False},
        }
    )
    plan = solve(snapshot(nodes, pods), policy, options=OPTS)
    assert [u.pod for u in plan.unplaced] == ["default/r-0-1"]
    assert "replica-separation:zone" in plan.unplaced[0].reason


def test_required_separation_relaxed_marks_plan_degraded() -> None:
    nodes = [node("a1", "a", "ra"), node("a2", "a", "ra2")]
    pods = [redis_pod("r-0-0", "r", 0, "master", node="a1"), redis_pod("r-0-1", "r", 0, "replica")]
    policy = Policy.model_validate({"rules": {"replicaSeparation": {"zone": "required"}}})
    plan = solve(snapshot(nodes, pods), policy, options=OPTS)
    assert plan.degraded
    assert placed(plan, "r-0-1") == "a2"
    assert "replica-separation:zone" in plan.broken_rules


def test_survive_zone_spreads_masters_one_per_zone() -> None:
    nodes = [
        node(f"{z}{i}", z, f"{z}-r{i}", memory="64Gi", cpu="16") for z in "abc" for i in range(2)
    ]
    pods = [
        redis_pod(f"r-{s}-{r}", "r", s, "master" if r == 0 else "replica")
        for s in range(3)
        for r in range(2)
    ]
    policy = Policy.model_validate(
        {"rules": {"survive": "zone"}, "weights": {"masterBalance": 0, "zone": 0, "rack": 0}}
    )
    plan = solve(snapshot(nodes, pods), policy, options=OPTS)
    zones = sorted(placed(plan, f"r-{s}-0")[0] for s in range(3))  # type: ignore[index]
    assert zones == ["a", "b", "c"]
    assert not check_plan(snapshot(nodes, pods), policy, plan) or all(
        v.severity == "soft" for v in check_plan(snapshot(nodes, pods), policy, plan)
    )


def test_survive_zone_with_two_zones_cannot_hold_a_three_master_cluster() -> None:
    nodes = [
        node(f"{z}{i}", z, f"{z}-r{i}", memory="64Gi", cpu="16") for z in "ab" for i in range(3)
    ]
    pods = [
        redis_pod(f"r-{s}-{r}", "r", s, "master" if r == 0 else "replica")
        for s in range(3)
        for r in range(2)
    ]
    policy = Policy.model_validate({"rules": {"survive": "zone"}})
    plan = solve(snapshot(nodes, pods), policy, options=OPTS)
    assert len(plan.unplaced) == 6
    assert all(
        "survive: zone needs the masters of default/r in at least 3 zones" in u.reason
        for u in plan.unplaced
    )


def test_survival_spreads_masters_over_zones() -> None:
    nodes = [
        node(f"{z}{i}", z, f"{z}-r{i}", memory="64Gi", cpu="16") for z in "abc" for i in range(2)
    ]
    pods = [redis_pod(f"r-{s}-0", "r", s, "master") for s in range(3)]
    policy = Policy.model_validate({"weights": {"loadBalance": 0}})
    plan = solve(snapshot(nodes, pods), policy, options=OPTS)
    assert sorted(placed(plan, f"r-{s}-0")[0] for s in range(3)) == ["a", "b", "c"]  # type: ignore[index]
    assert plan.objective_terms["survival"] == 100
    assert plan.objective_terms["masterBalance"] == 0


def test_load_balance_prefers_emptier_node() -> None:
    nodes = [node("full", "a", "a1", memory="10Gi"), node("empty", "b", "b1", memory="10Gi")]
    pods = [
        other_pod("web", "full", "100m", "6Gi"),
        redis_pod("r-0-0", "r", 0, "master", memory="2Gi"),
    ]
    plan = solve(snapshot(nodes, pods), Policy(), options=OPTS)
    assert placed(plan, "r-0-0") == "empty"


def test_unlabelled_new_shard_gets_exactly_one_master() -> None:
    nodes = [node(f"n{i}", "abc"[i], f"r{i}") for i in range(3)]
    pods = [redis_pod(f"s-0-{i}", "s", 0, None) for i in range(3)]
    plan = solve(snapshot(nodes, pods), Policy(), options=OPTS)
    assert sorted(role_of(plan, f"s-0-{i}") for i in range(3)) == ["master", "replica", "replica"]


def test_whole_shard_or_nothing() -> None:
    nodes = [node("n1", "a", "a1", memory="2Gi"), node("n2", "b", "b1", memory="1Gi")]
    pods = [
        redis_pod("r-0-0", "r", 0, "master", memory="2Gi"),
        redis_pod("r-0-1", "r", 0, "replica", memory="2Gi"),
    ]
    plan = solve(snapshot(nodes, pods), Policy(), options=OPTS)
    assert {u.pod for u in plan.unplaced} == {"default/r-0-0", "default/r-0-1"}
    partial = Policy.model_validate({"permit": {"allowPartialShards": True}})
    plan = solve(snapshot(nodes, pods), partial, options=OPTS)
    assert len(plan.unplaced) == 1


def test_pod_no_node_accepts_gets_filter_summary() -> None:
    nodes = [node("n1", "a", "a1", memory="1Gi"), node("n2", "b", "b1", ready=False)]
    pods = [redis_pod("r-0-0", "r", 0, "master", memory="2Gi")]
    plan = solve(snapshot(nodes, pods), Policy(), options=OPTS)
    reason = plan.unplaced[0].reason
    assert (
        "0/2 nodes are available" in reason
        and "insufficient memory" in reason
        and "not Ready" in reason
    )


def test_rebalance_fails_over_instead_of_moving() -> None:
    """Two masters on one node: the cheapest fix is a failover, not a move."""
    nodes = [
        node("n1", "a", "a1", memory="64Gi", cpu="16"),
        node("n2", "b", "b1", memory="64Gi", cpu="16"),
    ]
    pods = [
        redis_pod("r-0-0", "r", 0, "master", node="n1"),
        redis_pod("r-0-1", "r", 0, "replica", node="n2"),
        redis_pod("r-1-0", "r", 1, "master", node="n1"),
        redis_pod("r-1-1", "r", 1, "replica", node="n2"),
    ]
    snap = snapshot(nodes, pods)
    plan = solve(snap, Policy(), "rebalance", options=OPTS)
    assert len(plan.failovers) == 1
    assert not [a for a in plan.assignments if a.action == "move"]
    assert not [v for v in plan.violations if v.severity == "hard"]


def test_rebalance_keeps_a_clean_cluster_unchanged() -> None:
    nodes = [node(f"n{i}", "abc"[i], f"r{i}", memory="64Gi", cpu="16") for i in range(3)]
    pods = [
        redis_pod("r-0-0", "r", 0, "master", node="n0"),
        redis_pod("r-0-1", "r", 0, "replica", node="n1"),
        redis_pod("r-1-0", "r", 1, "master", node="n1"),
        redis_pod("r-1-1", "r", 1, "replica", node="n2"),
    ]
    plan = solve(snapshot(nodes, pods), Policy(), "rebalance", options=OPTS)
    assert not plan.failovers
    assert all(a.action == "keep" for a in plan.assignments)
