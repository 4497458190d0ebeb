"""Properties on random small clusters: every plan passes the independent checker, is never worse
than greedy when greedy succeeds, and matches brute force on tiny instances."""

from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from models.cluster import Role
from models.policy import Policy
from solver.check import check_plan, evaluate_objective, keep_plan, majority_shortfall
from solver.classes.problem import build_problem
from solver.greedy import greedy_plan
from solver.majority import keep_majorities
from solver.placement import Placement, to_plan
from solver.solve import SolveOptions, solve
from tests.bruteforce import brute_force_optimum
from tests.kube_dicts import node, other_pod, redis_pod, snapshot

OPTS = SolveOptions(time_limit=20, workers=1)
SETTINGS = settings(
    max_examples=25, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow]
)


@st.composite
def clusters(
    draw: st.DrawFn, max_nodes: int = 8, max_shards: int = 4
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    n = draw(st.integers(2, max_nodes))
    zones = draw(st.integers(1, 3))
    nodes = [
        node(
            f"n{i}",
            "abc"[i % zones],
            f"{'abc'[i % zones]}-r{draw(st.integers(0, 1))}",
            cpu=draw(st.sampled_from(["2", "4", "8"])),
            memory=draw(st.sampled_from(["4Gi", "8Gi", "16Gi"])),
        )
        for i in range(n)
    ]
    pods: list[dict[str, Any]] = []
    if draw(st.booleans()):
        pods.append(other_pod("web", "n0", "1", "2Gi"))
    for s in range(draw(st.integers(1, max_shards))):
        size = draw(st.integers(1, 3))
        labelled = draw(st.booleans())
        mem = draw(st.sampled_from(["1Gi", "2Gi", "3Gi"]))
        for r in range(size):
            role = ("master" if r == 0 else "replica") if labelled else None
            pods.append(redis_pod(f"c{s % 2}-{s}-{r}", f"c{s % 2}", s, role, memory=mem))
    return nodes, pods


@st.composite
def policies(draw: st.DrawFn) -> Policy:
    return Policy.model_validate(
        {
            "rules": {
                "maxMastersPerNode": draw(st.integers(1, 2)),
                "replicaSeparation": {
                    "rack": draw(st.sampled_from(["required", "preferred", "ignore"])),
                    "zone": draw(st.sampled_from(["required", "preferred", "ignore"])),
                },
                "survive": draw(st.sampled_from(["none", "none", "zone", "host"])),
            },
            "degradation": {"relaxWhenInfeasible": draw(st.booleans())},
        }
    )


@SETTINGS
@given(clusters(), policies())
def test_every_plan_passes_the_checker(
    cluster: tuple[list[dict[str, Any]], list[dict[str, Any]]], policy: Policy
) -> None:
    snap = snapshot(*cluster, policy=policy)
    plan = solve(snap, policy, options=OPTS)
    hard = [v for v in check_plan(snap, policy, plan) if v.severity == "hard"]
    if plan.degraded:
        hard = [v for v in hard if v.rule != "replica-separation"]
    assert hard == [], hard
    assert plan.status in ("OPTIMAL", "FEASIBLE")
    assert {a.pod for a in plan.assignments} == {m.key for m in snap.members}


@SETTINGS
@given(clusters(), policies())
def test_never_worse_than_greedy(
    cluster: tuple[list[dict[str, Any]], list[dict[str, Any]]], policy: Policy
) -> None:
    snap = snapshot(*cluster, policy=policy)
    baseline = greedy_plan(snap, policy)
    if baseline.unplaced or any(v.severity == "hard" for v in check_plan(snap, policy, baseline)):
        return  # greedy failed: nothing to compare against
    plan = solve(snap, policy, options=OPTS)
    assert not plan.unplaced
    assert plan.objective <= evaluate_objective(snap, policy, baseline)["total"]


@settings(
    max_examples=30, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow]
)
@given(clusters(max_nodes=5, max_shards=2), policies())
def test_optimal_on_tiny_instances_matches_brute_force(
    cluster: tuple[list[dict[str, Any]], list[dict[str, Any]]], policy: Policy
) -> None:
    snap = snapshot(*cluster, policy=policy)
    if len(snap.pending) > 6:
        return
    problem = build_problem(snap, policy, "place")
    exact_classes = all(c.size == 1 for c in problem.classes)
    best = brute_force_optimum(snap, policy)
    plan = solve(snap, policy, options=OPTS)
    if best is None:
        assert plan.unplaced or plan.degraded
        return
    assert not plan.unplaced
    assert plan.bound <= best  # a proven bound never exceeds the true optimum
    assert plan.status == "OPTIMAL"
    if exact_classes:
        assert plan.objective == best
    else:
        # Identical nodes are one class; the solver's load term is the class average there.
        assert plan.objective >= best


@st.composite
def running_clusters(draw: st.DrawFn) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Up to 5 nodes and 5 running pods, placed anywhere (a rebalance has things to fix)."""
    n = draw(st.integers(2, 5))
    nodes = [
        node(f"n{i}", "ab"[i % 2], f"{'ab'[i % 2]}-r{draw(st.integers(0, 1))}", memory="8Gi")
        for i in range(n)
    ]
    pods: list[dict[str, Any]] = []
    for s in range(draw(st.integers(1, 2))):
        for r in range(draw(st.integers(1, 3))):
            if len(pods) == 5:
                break
            where = f"n{draw(st.integers(0, n - 1))}"
            pods.append(
                redis_pod(f"c-{s}-{r}", "c", s, "master" if r == 0 else "replica", node=where)
            )
    return nodes, pods


@settings(
    max_examples=30, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow]
)
@given(running_clusters(), policies())
def test_rebalance_bound_and_status_match_brute_force(
    cluster: tuple[list[dict[str, Any]], list[dict[str, Any]]], policy: Policy
) -> None:
    """A rebalance plan's bound never exceeds the true optimum, and OPTIMAL is the optimum."""
    snap = snapshot(*cluster, policy=policy)
    best = brute_force_optimum(snap, policy, mode="rebalance")
    plan = solve(snap, policy, "rebalance", options=OPTS)
    if best is None or plan.unplaced:
        return
    hard = [v for v in check_plan(snap, policy, plan) if v.severity == "hard"]
    if hard:
        return  # the brute force optimum is over plans without hard violations
    assert plan.bound <= best
    if plan.status == "OPTIMAL":
        assert plan.objective == best


ZONES4 = "abcd"


@st.composite
def broken_clusters(draw: st.DrawFn) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Nodes over four zones, a quarter of them tainted, a Redis cluster whose running masters
    already leave it short of a majority against one zone's loss, and pending shards, some
    held by node affinity to a few zones."""
    n = draw(st.integers(5, 10))
    zone_of = [ZONES4[i % 4] if i < 4 else draw(st.sampled_from(ZONES4)) for i in range(n)]
    nodes = [
        node(
            f"n{i}",
            zone_of[i],
            f"{zone_of[i]}-r{draw(st.integers(0, 1))}",
            memory=draw(st.sampled_from(["4Gi", "8Gi", "16Gi"])),
            taints=["dedicated=batch:NoSchedule"] if draw(st.integers(0, 3)) == 0 else [],
        )
        for i in range(n)
    ]
    pods: list[dict[str, Any]] = []
    clusters = draw(st.integers(1, 2))
    shard = 0
    for c in range(clusters):
        masters = draw(st.integers(1, 5))
        # A majority of the running masters in one zone: that zone's loss takes the majority.
        heavy = draw(st.sampled_from(ZONES4))
        heavy_nodes = [i for i in range(n) if zone_of[i] == heavy]
        piled = masters // 2 + 1 if c == 0 else draw(st.integers(0, masters))
        for m in range(masters):
            where = draw(st.sampled_from(heavy_nodes)) if m < piled else draw(st.integers(0, n - 1))
            pods.append(redis_pod(f"c{c}-{shard}-0", f"c{c}", shard, "master", node=f"n{where}"))
            if draw(st.booleans()):
                pods.append(redis_pod(f"c{c}-{shard}-1", f"c{c}", shard, "replica"))
            shard += 1
        for _ in range(draw(st.integers(1, 5))):
            size = draw(st.integers(1, 3))
            mem = draw(st.sampled_from(["1Gi", "2Gi", "3Gi"]))
            extra: dict[str, Any] = {}
            if draw(st.booleans()):
                allowed = draw(st.lists(st.sampled_from(ZONES4), min_size=1, max_size=3))
                term = {"key": "topology.kubernetes.io/zone", "operator": "In", "values": allowed}
                extra["affinity"] = {
                    "nodeAffinity": {
                        "requiredDuringSchedulingIgnoredDuringExecution": {
                            "nodeSelectorTerms": [{"matchExpressions": [term]}]
                        }
                    }
                }
            for r in range(size):
                role = "master" if r == 0 else "replica"
                name = f"c{c}-{shard}-{r}"
                pods.append(redis_pod(name, f"c{c}", shard, role, memory=mem, **extra))
            shard += 1
    return nodes, pods


@settings(
    max_examples=40, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow]
)
@given(broken_clusters(), st.sampled_from(["none", "preferred", "required"]))
def test_a_plan_never_raises_a_clusters_shortfall_under_survive(
    cluster: tuple[list[dict[str, Any]], list[dict[str, Any]]], zone_separation: str
) -> None:
    """Running masters already short of a majority against a zone's loss: a place-mode plan
    may leave that as it is, never make it worse, as the independent checker counts it, for
    any Redis cluster."""
    policy = Policy.model_validate(
        {
            "rules": {
                "survive": "zone",
                "replicaSeparation": {"zone": zone_separation.replace("none", "ignore")},
            }
        }
    )
    snap = snapshot(*cluster, policy=policy)
    before = majority_shortfall(snap, keep_plan(snap), "zone")
    assert before.get("default/c0", 0) > 0  # the case is one that breaks survive already
    plan = solve(snap, policy, options=SolveOptions(time_limit=5, workers=1))
    after = majority_shortfall(snap, plan, "zone")
    for name, short in after.items():
        assert short <= before.get(name, 0), (name, before, after)


@settings(
    max_examples=60, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow]
)
@given(broken_clusters(), st.randoms(use_true_random=False))
def test_any_placement_left_to_keep_majorities_never_raises_a_shortfall(
    cluster: tuple[list[dict[str, Any]], list[dict[str, Any]]], rng: Any
) -> None:
    """Whatever engine placed the pending pods, and however badly (here: at random, rules
    aside), what every place-mode candidate passes before it is judged leaves no Redis cluster
    further short of a master majority than what runs, by the checker's count."""
    policy = Policy.model_validate({"rules": {"survive": "zone"}})
    snap = snapshot(*cluster, policy=policy)
    before = majority_shortfall(snap, keep_plan(snap), "zone")
    placement = Placement()
    names = [n.name for n in snap.nodes]
    for m in snap.pending:
        if rng.random() < 0.8:
            placement.node[m.key] = rng.choice(names)
            placement.role[m.key] = m.role or Role.REPLICA
    keep_majorities(snap, policy, placement)
    after = majority_shortfall(snap, to_plan(snap, placement, "place", "FEASIBLE"), "zone")
    for name, short in after.items():
        assert short <= before.get(name, 0), (name, before, after)
