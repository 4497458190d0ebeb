"""The independent checker: each rule flags exactly the violation planted in a tiny cluster.

Every cluster is built from kubectl-shaped dicts through the real parser, and every expected
number below is worked out by hand in the test, never taken from the code under test.
"""

import time
from collections.abc import Mapping, Sequence
from typing import Any

import pytest

from models.cluster import Member, Node, Pod, Role
from models.plan import Failover, Plan, Unplaced, Violation
from models.policy import Policy
from models.resources import Resources
from models.snapshot import Snapshot
from solver import check
from solver.check import evaluate_objective, final_placement, worst_domain_loss
from tests.bruteforce import brute_force_optimum, plan_for
from tests.kube_dicts import node, other_pod, redis_pod, snapshot

GI = 2**30


def make_policy(
    rules: Mapping[str, Any] | None = None, weights: Mapping[str, Any] | None = None
) -> Policy:
    """A policy as a user writes it (camelCase keys), defaults elsewhere."""
    return Policy.model_validate({"rules": dict(rules or {}), "weights": dict(weights or {})})


QUIET = make_policy({"replicaSeparation": {"rack": "ignore", "zone": "ignore"}})
"""Separation off, so a test about another rule sees only that rule."""


def other_than_survival(violations: list[Violation]) -> list[Violation]:
    """Without the soft survival findings: in a cluster of a node or two, losing one host takes
    a master majority whatever the plan, so tests about another rule leave them out (survival
    has tests of its own below, on ``check.check_plan`` itself)."""
    return [v for v in violations if not (v.rule == "survive" and v.severity == "soft")]


def check_plan(snap: Snapshot, policy: Policy, plan: Plan) -> list[Violation]:
    return other_than_survival(check.check_plan(snap, policy, plan))


def audit(snap: Snapshot, policy: Policy) -> list[Violation]:
    return other_than_survival(check.audit(snap, policy))


def rules_of(violations: Sequence[Any]) -> list[tuple[str, str]]:
    return [(v.rule, v.severity) for v in violations]


# --------------------------------------------------------------------------- final placement


def test_members_left_out_of_the_plan_keep_their_place() -> None:
    """A partial plan does not lose the running members, and pending ones stay unplaced."""
    snap = snapshot(
        [node("n1", "a", "r1"), node("n2", "b", "r2")],
        [redis_pod("m", "c", 0, "master", node="n1"), redis_pod("r", "c", 0, None)],
    )
    empty = Plan(status="FEASIBLE")
    assert final_placement(snap, empty) == {
        "default/m": ("n1", Role.MASTER),
        "default/r": (None, Role.REPLICA),
    }
    placed = plan_for(snap, {"r": "n2"})
    assert final_placement(snap, placed)["default/r"] == ("n2", Role.REPLICA)


def test_a_pod_listed_as_unplaced_has_no_node() -> None:
    """The plan's unplaced list wins over a node left in the assignment."""
    snap = snapshot([node("n1", "a", "r1")], [redis_pod("m", "c", 0, "master")])
    placed = plan_for(snap, {"m": "n1"})
    plan = Plan(
        status="FEASIBLE",
        assignments=placed.assignments,
        unplaced=[Unplaced(pod="default/m", reason="no room")],
    )
    assert final_placement(snap, plan)["default/m"] == (None, Role.MASTER)


# --------------------------------------------------------------------------- fits


def fits_of(nodes: Sequence[dict[str, Any]], pod: dict[str, Any], target: str) -> list[str]:
    """Place the one pending pod on ``target``; return the messages of every violation found."""
    snap = snapshot(nodes, [pod])
    violations = check_plan(snap, QUIET, plan_for(snap, {pod["metadata"]["name"]: target}))
    assert all(v.rule == "fits" and v.severity == "hard" for v in violations), violations
    return [v.message for v in violations]


def test_a_clean_placement_has_no_violation() -> None:
    assert fits_of([node("n1", "a", "r1")], redis_pod("m", "c", 0, "master"), "n1") == []


NO_SCHEDULE = "dedicated=redis:NoSchedule"


@pytest.mark.parametrize(
    ("taint", "tolerations", "flagged"),
    [
        (NO_SCHEDULE, [], True),
        (NO_SCHEDULE, [{"key": "dedicated", "operator": "Equal", "value": "redis"}], False),
        (NO_SCHEDULE, [{"key": "dedicated", "value": "redis", "effect": "NoSchedule"}], False),
        (NO_SCHEDULE, [{"key": "dedicated", "operator": "Equal", "value": "other"}], True),
        (NO_SCHEDULE, [{"key": "other", "operator": "Exists"}], True),
        (NO_SCHEDULE, [{"operator": "Exists"}], False),
        (NO_SCHEDULE, [{"key": "dedicated", "operator": "Exists"}], False),
        (NO_SCHEDULE, [{"key": "dedicated", "operator": "Exists", "effect": "NoExecute"}], True),
        ("dedicated=redis:PreferNoSchedule", [], False),
        ("gpu:NoExecute", [], True),
        ("gpu:NoExecute", [{"key": "gpu", "operator": "Exists", "effect": "NoExecute"}], False),
        ("gpu:NoSchedule", [{"key": "gpu", "operator": "Equal", "effect": "NoSchedule"}], False),
        ("gpu:NoSchedule", [{"key": "gpu", "operator": "Equal", "value": "x"}], True),
    ],
)
def test_taints_follow_kubernetes_toleration_rules(
    taint: str, tolerations: list[dict[str, str]], flagged: bool
) -> None:
    pod = redis_pod("m", "c", 0, "master", tolerations=tolerations)
    messages = fits_of([node("n1", "a", "r1", taints=[taint])], pod, "n1")
    assert len(messages) == int(flagged)
    if flagged:
        assert "taint" in messages[0] and "not tolerated" in messages[0]


@pytest.mark.parametrize(
    ("labels", "flagged"),
    [({"disk": "ssd"}, False), ({"disk": "hdd"}, True), ({}, True)],
)
def test_node_selector_needs_every_label_equal(labels: dict[str, str], flagged: bool) -> None:
    pod = redis_pod("m", "c", 0, "master", nodeSelector={"disk": "ssd"})
    messages = fits_of([node("n1", "a", "r1", labels=labels)], pod, "n1")
    assert len(messages) == int(flagged)
    if flagged:
        assert "nodeSelector disk=ssd" in messages[0]


def expr(key: str, operator: str, *values: str) -> dict[str, Any]:
    return {"key": key, "operator": operator, "values": list(values)}


def required(*terms: Mapping[str, Any]) -> dict[str, Any]:
    """spec.affinity with the given nodeSelectorTerms."""
    return {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": list(terms)}
        }
    }


@pytest.mark.parametrize(
    ("terms", "flagged"),
    [
        ([{"matchExpressions": [expr("disk", "In", "ssd", "nvme")]}], False),
        ([{"matchExpressions": [expr("disk", "In", "hdd")]}], True),
        ([{"matchExpressions": [expr("gpu", "In", "yes")]}], True),
        ([{"matchExpressions": [expr("disk", "NotIn", "hdd")]}], False),
        ([{"matchExpressions": [expr("disk", "NotIn", "ssd")]}], True),
        ([{"matchExpressions": [expr("gpu", "NotIn", "yes")]}], False),
        ([{"matchExpressions": [expr("disk", "Exists")]}], False),
        ([{"matchExpressions": [expr("gpu", "Exists")]}], True),
        ([{"matchExpressions": [expr("gpu", "DoesNotExist")]}], False),
        ([{"matchExpressions": [expr("disk", "DoesNotExist")]}], True),
        ([{"matchExpressions": [expr("gen", "Gt", "4")]}], False),
        ([{"matchExpressions": [expr("gen", "Gt", "5")]}], True),
        ([{"matchExpressions": [expr("gen", "Gt", "10")]}], True),
        ([{"matchExpressions": [expr("gen", "Lt", "6")]}], False),
        ([{"matchExpressions": [expr("gen", "Lt", "5")]}], True),
        ([{"matchExpressions": [expr("cores", "Gt", "1")]}], True),
        ([{"matchExpressions": [expr("disk", "Gt", "1")]}], True),
        ([{"matchFields": [expr("metadata.name", "In", "n1")]}], False),
        ([{"matchFields": [expr("metadata.name", "In", "n2")]}], True),
        ([{"matchFields": [expr("metadata.name", "NotIn", "n1")]}], True),
        ([{"matchFields": [expr("metadata.name", "NotIn", "n2")]}], False),
        ([{"matchFields": [expr("metadata.uid", "In", "n1")]}], True),
        (
            [
                {"matchExpressions": [expr("disk", "In", "hdd")]},
                {"matchExpressions": [expr("disk", "In", "ssd")]},
            ],
            False,
        ),
        ([{"matchExpressions": [expr("disk", "In", "ssd"), expr("gpu", "Exists")]}], True),
        (
            [
                {
                    "matchExpressions": [expr("disk", "In", "ssd")],
                    "matchFields": [expr("metadata.name", "In", "n2")],
                }
            ],
            True,
        ),
        ([{}], True),
    ],
)
def test_required_node_affinity(terms: list[dict[str, Any]], flagged: bool) -> None:
    """Terms ORed, expressions and fields within a term ANDed, Gt/Lt compare integers."""
    target = node("n1", "a", "r1", labels={"disk": "ssd", "gen": "5"})
    pod = redis_pod("m", "c", 0, "master", affinity=required(*terms))
    messages = fits_of([target], pod, "n1")
    assert len(messages) == int(flagged)
    if flagged:
        assert "affinity" in messages[0]


@pytest.mark.parametrize(
    ("state", "expected"),
    [
        ({"ready": False}, "is not Ready"),
        ({"unschedulable": True}, "is unschedulable"),
        ({"zone": None}, "has no zone label"),
    ],
)
def test_node_state_blocks_new_pods(state: dict[str, Any], expected: str) -> None:
    kwargs: dict[str, Any] = {"zone": "a", "rack": "r1", **state}
    # one labelled node, so a missing zone label is a gap and not "the whole cluster is one zone"
    nodes = [node("n1", **kwargs), node("n2", "b", "r2")]
    messages = fits_of(nodes, redis_pod("m", "c", 0, "master"), "n1")
    assert len(messages) == 1
    assert expected in messages[0]


def test_a_node_missing_from_the_snapshot_does_not_fit() -> None:
    messages = fits_of([node("n1", "a", "r1")], redis_pod("m", "c", 0, "master"), "ghost")
    assert len(messages) == 1
    assert "not in the snapshot" in messages[0]


def test_kept_members_on_a_bad_node_are_not_fits_violations_of_the_plan() -> None:
    """fits judges only what the plan places or moves; audit reports the at-risk pods."""
    snap = snapshot(
        [node("n1", "a", "r1", ready=False, taints=["x:NoSchedule"]), node("n2", "b", "r2")],
        [redis_pod("m", "c", 0, "master", node="n1"), redis_pod("r", "c", 0, "replica")],
    )
    assert check_plan(snap, QUIET, plan_for(snap, {"r": "n2"})) == []


def test_a_keep_that_changes_node_is_checked_like_a_move() -> None:
    snap = snapshot(
        [node("n1", "a", "r1"), node("n2", "b", "r2", ready=False)],
        [redis_pod("m", "c", 0, "master", node="n1")],
    )
    plan = plan_for(snap, {"m": "n2"})
    sneaky = plan.model_copy(
        update={"assignments": [plan.assignments[0].model_copy(update={"action": "keep"})]}
    )
    assert rules_of(check_plan(snap, QUIET, sneaky)) == [("fits", "hard")]


@pytest.mark.parametrize(
    ("alloc", "other", "expected"),
    [
        ({"cpu": "1"}, ("600m", "1Gi"), "cpu"),
        ({"memory": "2Gi"}, ("100m", "1536Mi"), "memory"),
        ({"pods": 1}, ("100m", "1Gi"), "pods"),
    ],
)
def test_capacity_counts_everything_bound_to_the_node(
    alloc: dict[str, Any], other: tuple[str, str], expected: str
) -> None:
    """An unmanaged pod already there plus the new 500m/1Gi member overflow one resource."""
    full = node("n1", "a", "r1", **alloc)
    snap = snapshot([full], [other_pod("o", "n1", *other), redis_pod("m", "c", 0, "master")])
    violations = check_plan(snap, QUIET, plan_for(snap, {"m": "n1"}))
    assert rules_of(violations) == [("fits", "hard")]
    assert violations[0].nodes == ["n1"] and violations[0].pods == ["default/m"]
    assert "over capacity" in violations[0].message and expected in violations[0].message
    # the same node without the unmanaged pod has room
    roomy = snapshot([full], [redis_pod("m", "c", 0, "master")])
    assert check_plan(roomy, QUIET, plan_for(roomy, {"m": "n1"})) == []


def test_capacity_counts_every_member_finally_on_the_node() -> None:
    """Each pod fits alone; two new ones together (600m each on one cpu) do not."""
    snap = snapshot(
        [node("n1", "a", "r1", cpu="1")],
        [
            redis_pod("a", "c", 0, "master", cpu="600m"),
            redis_pod("b", "c", 1, "master", cpu="600m"),
        ],
    )
    alone = check_plan(snap, make_policy({"maxMastersPerNode": 2}), plan_for(snap, {"a": "n1"}))
    assert alone == []
    both = check_plan(
        snap, make_policy({"maxMastersPerNode": 2}), plan_for(snap, {"a": "n1", "b": "n1"})
    )
    assert rules_of(both) == [("fits", "hard")]
    assert both[0].pods == ["default/a", "default/b"]


def test_a_moved_member_frees_its_old_node() -> None:
    """n1 has room for one 600m pod: moving the running one away lets the pending one in."""
    snap = snapshot(
        [node("n1", "a", "r1", cpu="1"), node("n2", "b", "r2")],
        [
            redis_pod("old", "c", 0, "master", node="n1", cpu="600m"),
            redis_pod("new", "c", 1, "master", cpu="600m"),
        ],
    )
    policy = make_policy(
        {"maxMastersPerNode": 2, "replicaSeparation": {"rack": "ignore", "zone": "ignore"}}
    )
    assert check_plan(snap, policy, plan_for(snap, {"new": "n1", "old": "n2"})) == []
    assert rules_of(check_plan(snap, policy, plan_for(snap, {"new": "n1"}))) == [("fits", "hard")]


def test_capacity_is_only_checked_where_pods_arrive() -> None:
    """An already overcommitted node is the audit's business, not a new plan's."""
    snap = snapshot(
        [node("n1", "a", "r1", cpu="1"), node("n2", "b", "r2")],
        [
            other_pod("o", "n1", "2", "1Gi"),
            redis_pod("m", "c", 0, "master", node="n1"),
            redis_pod("r", "c", 0, "replica"),
        ],
    )
    assert check_plan(snap, QUIET, plan_for(snap, {"r": "n2"})) == []


# --------------------------------------------------------------------------- shard-spread


def spread_of(layout: Mapping[str, str], nodes: Sequence[dict[str, Any]]) -> list[Any]:
    pods = [
        redis_pod("m0", "c", 0, "master"),
        redis_pod("r0", "c", 0, "replica"),
        redis_pod("m1", "c", 1, "master"),
    ]
    snap = snapshot(nodes, pods)
    return check_plan(snap, QUIET, plan_for(snap, layout))


THREE = [node("n1", "a", "r1"), node("n2", "b", "r2"), node("n3", "c", "r3")]


def test_shard_spread_flags_two_members_on_one_node() -> None:
    violations = spread_of({"m0": "n1", "r0": "n1", "m1": "n2"}, THREE)
    assert rules_of(violations) == [("shard-spread", "hard")]
    assert violations[0].pods == ["default/m0", "default/r0"]


def test_shard_spread_compares_hosts_not_node_names() -> None:
    """Two Node objects with one hostname label are one machine."""
    twins = [
        node("n1", "a", "r1", labels={"kubernetes.io/hostname": "box"}),
        node("n2", "b", "r2", labels={"kubernetes.io/hostname": "box"}),
        node("n3", "c", "r3"),
    ]
    violations = spread_of({"m0": "n1", "r0": "n2", "m1": "n3"}, twins)
    assert rules_of(violations) == [("shard-spread", "hard")]
    assert violations[0].nodes == ["n1", "n2"]


def test_shard_spread_allows_other_shards_on_one_host() -> None:
    assert spread_of({"m0": "n1", "r0": "n2", "m1": "n2"}, THREE) == []


# --------------------------------------------------------------------------- master-exclusivity


def masters_on_one_node(count: int, limit: int) -> list[Any]:
    """``count`` masters of different Redis clusters, all on n1."""
    pods = [redis_pod(f"m{i}", f"c{i}", 0, "master") for i in range(count)]
    snap = snapshot([node("n1", "a", "r1")], pods)
    policy = make_policy({"maxMastersPerNode": limit})
    return check_plan(snap, policy, plan_for(snap, {f"m{i}": "n1" for i in range(count)}))


@pytest.mark.parametrize(
    ("count", "limit", "flagged"),
    [(1, 1, False), (2, 1, True), (2, 2, False), (3, 2, True)],
)
def test_master_exclusivity_counts_masters_of_all_clusters(
    count: int, limit: int, flagged: bool
) -> None:
    violations = masters_on_one_node(count, limit)
    assert rules_of(violations) == ([("master-exclusivity", "hard")] if flagged else [])
    if flagged:
        assert len(violations[0].pods) == count and violations[0].nodes == ["n1"]


# --------------------------------------------------------------------------- shard-roles


@pytest.mark.parametrize(
    ("layout", "roles", "flagged"),
    [
        ({"a": "n1", "b": "n2"}, {"a": "master", "b": "replica"}, False),
        ({"a": "n1", "b": "n2"}, {"a": "master", "b": "master"}, True),
        ({"a": "n1", "b": "n2"}, {"a": "replica", "b": "replica"}, True),
        ({"a": None, "b": "n2"}, {"a": "master", "b": "replica"}, True),
        ({"a": None, "b": None}, {"a": "master", "b": "replica"}, False),
    ],
)
def test_shard_roles_needs_exactly_one_placed_master(
    layout: dict[str, str | None], roles: dict[str, str], flagged: bool
) -> None:
    snap = snapshot(
        [node("n1", "a", "r1"), node("n2", "b", "r2")],
        [redis_pod("a", "c", 0, None), redis_pod("b", "c", 0, None)],
    )
    policy = make_policy({"maxMastersPerNode": 2, "replicaSeparation": {"zone": "ignore"}})
    violations = check_plan(snap, policy, plan_for(snap, layout, roles))
    assert rules_of(violations) == ([("shard-roles", "hard")] if flagged else [])


# --------------------------------------------------------------------------- replica-separation

SEPARATION_NODES = [
    node("a1", "a", "ra"),
    node("a2", "a", "ra"),
    node("a3", "a", "rb"),
    node("b1", "b", "rc"),
]


@pytest.mark.parametrize(
    ("replica_on", "rack", "zone", "expected"),
    [
        ("a2", "required", "ignore", [("hard", "rack")]),
        ("a2", "preferred", "ignore", [("soft", "rack")]),
        ("a2", "ignore", "ignore", []),
        ("a2", "preferred", "required", [("soft", "rack"), ("hard", "zone")]),
        ("a3", "required", "preferred", [("soft", "zone")]),
        ("a3", "ignore", "required", [("hard", "zone")]),
        ("a3", "required", "ignore", []),
        ("b1", "required", "required", []),
    ],
)
def test_replica_separation_by_level_and_strength(
    replica_on: str, rack: str, zone: str, expected: list[tuple[str, str]]
) -> None:
    """Master on a1 (zone a, rack ra); a2 shares rack and zone, a3 only the zone, b1 nothing."""
    snap = snapshot(
        SEPARATION_NODES,
        [redis_pod("m", "c", 0, "master", node="a1"), redis_pod("r", "c", 0, "replica")],
    )
    policy = make_policy({"replicaSeparation": {"rack": rack, "zone": zone}})
    violations = check_plan(snap, policy, plan_for(snap, {"r": replica_on}))
    assert all(v.rule == "replica-separation" for v in violations)
    found = [(v.severity, "rack" if "shares rack" in v.message else "zone") for v in violations]
    assert found == expected
    for v in violations:
        assert v.pods == ["default/r", "default/m"]


def test_a_replica_of_another_shard_may_share_the_rack() -> None:
    snap = snapshot(
        SEPARATION_NODES,
        [
            redis_pod("m0", "c", 0, "master", node="a1"),
            redis_pod("r1", "c", 1, "replica"),
            redis_pod("m1", "c", 1, "master", node="b1"),
        ],
    )
    policy = make_policy({"replicaSeparation": {"rack": "required", "zone": "required"}})
    assert check_plan(snap, policy, plan_for(snap, {"r1": "a2"})) == []


# --------------------------------------------------------------------------- survive

ZONES = [node(f"{z}{i}", z, f"{z}{i}") for z in "abc" for i in (1, 2)]
SURVIVE_ZONE = make_policy(
    {"survive": "zone", "replicaSeparation": {"rack": "ignore", "zone": "ignore"}}
)


def three_shards(layout: Mapping[int, tuple[str, str | None]]) -> tuple[Snapshot, Plan]:
    """One Redis cluster of three shards; ``layout[shard] = (master node, replica node)``."""
    pods = []
    for shard in range(3):
        pods += [
            redis_pod(f"m{shard}", "c", shard, "master"),
            redis_pod(f"r{shard}", "c", shard, "replica"),
        ]
    snap = snapshot(ZONES, pods)
    nodes: dict[str, str | None] = {}
    for shard, (master, replica) in layout.items():
        nodes[f"m{shard}"], nodes[f"r{shard}"] = master, replica
    return snap, plan_for(snap, nodes)


def test_one_master_per_zone_survives_any_zone() -> None:
    snap, plan = three_shards({0: ("a1", "b2"), 1: ("b1", "c2"), 2: ("c1", "a2")})
    assert check_plan(snap, SURVIVE_ZONE, plan) == []


def test_two_masters_in_one_zone_lose_the_majority() -> None:
    """Losing zone a leaves 1 of 3 masters, not more than half; every shard keeps a replica."""
    snap, plan = three_shards({0: ("a1", "b2"), 1: ("a2", "b1"), 2: ("c1", "b1")})
    violations = check_plan(snap, SURVIVE_ZONE, plan)
    assert rules_of(violations) == [("survive", "hard")]
    assert "zone a" in violations[0].message and "default/c" in violations[0].message
    assert "shard" not in violations[0].message
    assert violations[0].nodes == ["a1", "a2"]


def test_a_shard_inside_one_zone_is_lost_with_it() -> None:
    snap, plan = three_shards({0: ("a1", "a2"), 1: ("b1", "c2"), 2: ("c1", "b2")})
    violations = check_plan(snap, SURVIVE_ZONE, plan)
    assert rules_of(violations) == [("survive", "hard")]
    message = violations[0].message
    assert "zone a" in message and "default/c/0" in message and "masters" not in message


def test_survive_none_checks_nothing() -> None:
    """A layout that fails zone loss twice over passes when survive is none."""
    snap, plan = three_shards({0: ("a1", "a2"), 1: ("a2", "b1"), 2: ("b2", "c1")})
    assert check_plan(snap, QUIET, plan) == []
    assert rules_of(check_plan(snap, SURVIVE_ZONE, plan)) == [("survive", "hard")]


def test_without_survive_a_lost_majority_is_still_a_soft_finding_at_its_level() -> None:
    """Zone a holds 2 of 3 masters: under the default policy that is one soft finding at the
    zone level (hosts and racks here each hold one master, so they survive); with survive:
    zone the same finding is hard."""
    snap, plan = three_shards({0: ("a1", "b2"), 1: ("a2", "c1"), 2: ("c2", "b1")})
    quiet = check.check_plan(snap, QUIET, plan)
    assert rules_of(quiet) == [("survive", "soft")]
    assert quiet[0].message.startswith("losing zone a leaves cluster default/c with 1 of 3")
    hard = check.check_plan(snap, SURVIVE_ZONE, plan)
    assert rules_of(hard) == [("survive", "hard")]
    assert hard[0].message == quiet[0].message


def test_each_level_in_use_is_judged_and_a_zone_surviving_layout_has_no_finding() -> None:
    """Three members per shard over three zones survive every level; without its third member,
    shard 0 lies inside rack r1 and zone a and is lost with either (a soft finding at each),
    while each host keeps it. The rack level is judged only where nodes carry a rack label."""
    nodes = [node("a1", "a", "r1"), node("a2", "a", "r1"), node("b1", "b", "r2")]
    nodes += [node("c1", "c", "r3"), node("b2", "b", "r4"), node("c2", "c", "r5")]
    pods = []
    for shard, (master, replica, other) in enumerate(
        [("a1", "a2", "b1"), ("b2", "c1", "a2"), ("c2", "b1", "a1")]
    ):
        pods += [
            redis_pod(f"m{shard}", "c", shard, "master", node=master),
            redis_pod(f"r{shard}", "c", shard, "replica", node=replica),
            redis_pod(f"s{shard}", "c", shard, "replica", node=other),
        ]
    snap = snapshot(nodes, pods)
    assert check.check_plan(snap, QUIET, plan_for(snap, {})) == []
    unlabelled = snapshot([node(f"{z}{i}", z, None) for z in "abc" for i in (1, 2)], pods)
    assert check.survival_levels(QUIET, unlabelled.nodes) == ["host", "zone"]
    assert check.survival_levels(QUIET, snap.nodes) == ["host", "rack", "zone"]
    two = [p for p in pods if p["metadata"]["name"] != "s0"]
    lost = check.check_plan(snapshot(nodes, two), QUIET, plan_for(snapshot(nodes, two), {}))
    assert [(v.rule, v.severity, v.message.split(" leaves")[0]) for v in lost] == [
        ("survive", "soft", "losing rack r1"),
        ("survive", "soft", "losing zone a"),
    ]


def test_an_unplaced_member_does_not_keep_its_shard_alive() -> None:
    """survive host: the replica is unplaced, so losing the master's host loses the shard."""
    snap = snapshot(
        [node("n1", "a", "r1"), node("n2", "b", "r2")],
        [redis_pod("m", "c", 0, "master"), redis_pod("r", "c", 0, "replica")],
    )
    policy = make_policy({"survive": "host"})
    lonely = check_plan(snap, policy, plan_for(snap, {"m": "n1", "r": None}))
    assert rules_of(lonely) == [("survive", "hard")]
    assert "host n1" in lonely[0].message
    # with both placed, losing either host leaves the other member — but not a master majority
    both = check_plan(snap, policy, plan_for(snap, {"m": "n1", "r": "n2"}))
    assert rules_of(both) == [("survive", "hard")]
    assert "0 of 1 masters" in both[0].message


# --------------------------------------------------------------------------- worst domain loss


def test_worst_domain_loss_per_level() -> None:
    """Zone a holds 2 of 3 masters; host a1 holds one master whose replica is unplaced.

    host: every master host takes 1/3; a1 wins the tie because it also loses shard 0.
    rack: racks are the zone's hosts here (a1, a2...) so the same as host.
    zone: a takes 2/3 and shard 0 (its only member is on a1).
    """
    snap, plan = three_shards({0: ("a1", None), 1: ("a2", "b1"), 2: ("c1", "b1")})
    losses = {d.level: d for d in worst_domain_loss(snap, QUIET, plan)}
    assert losses["host"].domain == "a1"
    assert losses["host"].master_loss_ratio == pytest.approx(1 / 3)
    assert losses["host"].shards_lost == 1
    assert losses["rack"].domain == "a1"
    assert losses["zone"].domain == "a"
    assert losses["zone"].master_loss_ratio == pytest.approx(2 / 3)
    assert losses["zone"].cluster == "default/c"
    assert losses["zone"].shards_lost == 1


def test_worst_domain_loss_of_an_empty_placement() -> None:
    snap = snapshot([node("n1", "a", "r1")], [redis_pod("m", "c", 0, "master")])
    losses = worst_domain_loss(snap, QUIET, Plan(status="FEASIBLE"))
    assert [(d.level, d.domain, d.master_loss_ratio) for d in losses] == [
        ("host", None, 0.0),
        ("rack", None, 0.0),
        ("zone", None, 0.0),
    ]


# --------------------------------------------------------------------------- objective


def objective_example() -> tuple[Snapshot, Plan]:
    """Four 10Gi nodes in zones a (racks a1, a2) and b (rack b1 twice) plus a spare n5.

    c1 shard 0: master n1, replica n2 -> same zone a, other rack
    c1 shard 1: master n3, replica moves n5 -> n4 -> same rack b1 and zone b
    c2 shard 0: master n1, replica n3 -> apart
    other pods: 3Gi on n1, 9Gi on n5 (n5 hosts no member after the move)
    """
    nodes = [
        node("n1", "a", "a1", memory="10Gi"),
        node("n2", "a", "a2", memory="10Gi"),
        node("n3", "b", "b1", memory="10Gi"),
        node("n4", "b", "b1", memory="10Gi"),
        node("n5", "b", "b2", memory="10Gi"),
    ]
    pods = [
        redis_pod("c1-0-m", "c1", 0, "master", node="n1"),
        redis_pod("c1-0-r", "c1", 0, "replica", node="n2"),
        redis_pod("c1-1-m", "c1", 1, "master", node="n3"),
        redis_pod("c1-1-r", "c1", 1, "replica", node="n5"),
        redis_pod("c2-0-m", "c2", 0, "master"),
        redis_pod("c2-0-r", "c2", 0, "replica"),
        other_pod("o1", "n1", "100m", "3Gi"),
        other_pod("o5", "n5", "100m", "9Gi"),
    ]
    snap = snapshot(nodes, pods)
    failover = Failover(
        cluster="default/c1", shard="0", from_="default/c1-0-m", to="default/c1-0-r"
    )
    plan = plan_for(snap, {"c1-1-r": "n4", "c2-0-m": "n1", "c2-0-r": "n3"}, failovers=[failover])
    return snap, plan


def test_objective_term_by_term() -> None:
    """rack 50x1, zone 30x2, survival 100x(1+1), rackSurvival 20x(1+1), memberSpread
    10x(2+1), masterBalance 10x1, loadBalance 1x50, move 100x1, failover 20x1.

    survival: one zone failure takes at most one master of c1 (1) and of c2 (1); so does one
    rack failure (rackSurvival).
    memberSpread: one zone failure takes two members of c1 (either zone) and one of c2.
    masterBalance: n1 holds two masters (+1).
    loadBalance: n1 = 3Gi + 2 x 1Gi = 50 %; n5 (90 %) hosts no member any more.
    """
    snap, plan = objective_example()
    terms = evaluate_objective(snap, Policy(), plan)
    assert terms == {
        "rack": 50.0,
        "zone": 60.0,
        "survival": 200.0,
        "rackSurvival": 40.0,
        "memberSpread": 30.0,
        "superseded": 0.0,
        "masterBalance": 10.0,
        "loadBalance": 50.0,
        "move": 100.0,
        "failover": 20.0,
        "total": 560.0,
    }


def test_objective_follows_weights_and_strengths() -> None:
    """Required or ignored levels cost nothing; weights scale each term."""
    snap, plan = objective_example()
    policy = make_policy(
        {"replicaSeparation": {"rack": "required", "zone": "preferred"}},
        {
            "zone": 7,
            "survival": 4,
            "rackSurvival": 6,
            "memberSpread": 3,
            "masterBalance": 2,
            "loadBalance": 3,
            "move": 5,
            "failover": 0,
        },
    )
    terms = evaluate_objective(snap, policy, plan)
    assert terms["rack"] == 0.0
    assert terms["zone"] == 14.0
    assert terms["survival"] == 8.0
    assert terms["rackSurvival"] == 12.0
    assert terms["memberSpread"] == 9.0
    assert terms["masterBalance"] == 2.0
    assert terms["loadBalance"] == 150.0
    assert terms["move"] == 5.0
    assert terms["failover"] == 0.0
    assert terms["total"] == 14.0 + 8.0 + 12.0 + 9.0 + 2.0 + 150.0 + 5.0


def test_rack_survival_counts_the_fullest_rack_of_each_cluster() -> None:
    """Three masters of c in zone a: two in rack r1, one in r2. d has one in rack r2 of zone a
    and one in rack r1 of zone b: racks lie inside their zone, so that is another rack r1.

    survival: zone a holds all 3 of c's masters and one of d's (100 x (3 + 1)); rackSurvival:
    a/r1 holds 2 of c's, and no rack more than one of d's (20 x (2 + 1)).
    """
    nodes = [
        node("n1", "a", "r1"),
        node("n2", "a", "r1"),
        node("n3", "a", "r2"),
        node("n4", "b", "r1"),
    ]
    pods = [
        redis_pod("c-0", "c", 0, "master", node="n1"),
        redis_pod("c-1", "c", 1, "master", node="n2"),
        redis_pod("c-2", "c", 2, "master", node="n3"),
        redis_pod("d-0", "d", 0, "master", node="n3"),
        redis_pod("d-1", "d", 1, "master", node="n4"),
    ]
    snap = snapshot(nodes, pods)
    terms = evaluate_objective(snap, Policy(), plan_for(snap, {}))
    assert terms["survival"] == 100.0 * (3 + 1)
    assert terms["rackSurvival"] == 20.0 * (2 + 1)


def test_utilisation_is_floored() -> None:
    """1Gi of 3Gi is 33.3 %: the term is 33, not 34."""
    snap = snapshot([node("n1", "a", "r1", memory="3Gi")], [redis_pod("m", "c", 0, "master")])
    terms = evaluate_objective(snap, Policy(), plan_for(snap, {"m": "n1"}))
    assert terms["loadBalance"] == 33.0
    assert terms["survival"] == 100.0
    assert terms["masterBalance"] == 0.0


# --------------------------------------------------------------------------- audit


def test_audit_of_a_healthy_cluster_is_empty() -> None:
    snap = snapshot(
        [node("n1", "a", "r1"), node("n2", "b", "r2")],
        [redis_pod("m", "c", 0, "master", node="n1"), redis_pod("r", "c", 0, "replica", node="n2")],
    )
    assert audit(snap, Policy()) == []


@pytest.mark.parametrize(
    ("state", "expected"),
    [({"ready": False}, "not Ready"), ({"unschedulable": True}, "unschedulable")],
)
def test_audit_flags_members_at_risk(state: dict[str, Any], expected: str) -> None:
    snap = snapshot(
        [node("n1", "a", "r1", **state), node("n2", "b", "r2")],
        [redis_pod("m", "c", 0, "master", node="n1"), redis_pod("r", "c", 0, "replica", node="n2")],
    )
    violations = audit(snap, Policy())
    assert rules_of(violations) == [("fits", "soft")]
    assert violations[0].pods == ["default/m"]
    assert violations[0].message.startswith("default/m runs on a node that")
    assert expected in violations[0].message


def test_audit_counts_a_vanished_node_as_lost() -> None:
    """The master's node is gone: at risk, and with survive host the shard has one life left."""
    snap = snapshot(
        [node("n2", "b", "r2")],
        [
            redis_pod("m", "c", 0, "master", node="gone"),
            redis_pod("r", "c", 0, "replica", node="n2"),
        ],
    )
    violations = audit(snap, make_policy({"survive": "host"}))
    assert rules_of(violations) == [("fits", "soft"), ("survive", "hard")]
    assert "not in the snapshot" in violations[0].message


def test_audit_reports_hard_rules_of_running_pods_and_ignores_pending() -> None:
    snap = snapshot(
        [node("n1", "a", "r1"), node("n2", "b", "r2")],
        [
            redis_pod("m", "c", 0, "master", node="n1"),
            redis_pod("r", "c", 0, "replica", node="n1"),
            redis_pod("p", "c", 1, None),
        ],
    )
    violations = audit(snap, QUIET)
    assert rules_of(violations) == [("shard-spread", "hard")]


# --------------------------------------------------------------------------- brute force


def test_brute_force_trades_separation_against_load() -> None:
    """One role-less shard of two on three nodes; survival is always 100 and rackSurvival 20
    (one master).

    n1 (a, r1, 16Gi, 8Gi used), n2 (a, r2, 16Gi), n3 (b, r3, 4Gi):
    {n1,n2}: 120 + zone 30 + memberSpread 20 + util 56 = 226; {n1,n3}: 120 + memberSpread 10 +
    util 56 = 186; {n2,n3}: 120 + memberSpread 10 + util 25 = 155.
    """
    snap = snapshot(
        [node("n1", "a", "r1"), node("n2", "a", "r2"), node("n3", "b", "r3", memory="4Gi")],
        [
            other_pod("o", "n1", "100m", "8Gi"),
            redis_pod("x", "c", 0, None),
            redis_pod("y", "c", 0, None),
        ],
    )
    assert brute_force_optimum(snap, Policy()) == 155


def test_brute_force_picks_the_master_among_role_less_members() -> None:
    """x must go to n1 (selector), where another cluster's master already runs: y is the master.

    survival 100 x (1 + 1) and rackSurvival 20 x (1 + 1) (each cluster loses its one master with
    its zone and with its rack), memberSpread 10 x (1 + 1), no stacked master, load 2Gi/16Gi =
    12, different zones: 272.
    """
    snap = snapshot(
        [node("n1", "a", "r1", labels={"slot": "x"}), node("n2", "b", "r2")],
        [
            redis_pod("other", "k", 0, "master", node="n1"),
            redis_pod("x", "c", 0, None, nodeSelector={"slot": "x"}),
            redis_pod("y", "c", 0, None),
        ],
    )
    assert brute_force_optimum(snap, Policy()) == 272


def test_brute_force_reports_infeasible() -> None:
    """Two members of one shard, one usable host."""
    snap = snapshot(
        [node("n1", "a", "r1"), node("n2", "b", "r2", taints=["x:NoSchedule"])],
        [redis_pod("m", "c", 0, "master"), redis_pod("r", "c", 0, "replica")],
    )
    assert brute_force_optimum(snap, Policy()) is None


@pytest.mark.parametrize(("move_weight", "expected"), [(100, 226), (10, 146)])
def test_brute_force_rebalance_moves_only_when_it_pays(move_weight: int, expected: int) -> None:
    """Master n1 and replica n2 share rack r1 (50 + 30); n3 is elsewhere.

    Staying costs 80 + survival 100 + rackSurvival 20 + memberSpread 20 + load 6 = 226; moving
    one member to n3 costs move + 120 + 10 + 6. A failover never helps (the pair is symmetric).
    """
    snap = snapshot(
        [node("n1", "a", "r1"), node("n2", "a", "r1"), node("n3", "b", "r2")],
        [redis_pod("m", "c", 0, "master", node="n1"), redis_pod("r", "c", 0, "replica", node="n2")],
    )
    policy = make_policy(weights={"move": move_weight})
    assert brute_force_optimum(snap, policy, mode="rebalance") == expected
    assert brute_force_optimum(snap, policy, mode="place") == 226


def test_brute_force_refuses_big_instances() -> None:
    snap = snapshot([node(f"n{i}", "a", "r") for i in range(7)], [redis_pod("m", "c", 0, "master")])
    with pytest.raises(ValueError, match="too large"):
        brute_force_optimum(snap, Policy())


# --------------------------------------------------------------------------- scale


def big_cluster(zones: int = 3, nodes_per_zone: int = 1667, shards: int = 5000) -> Snapshot:
    """~5,000 nodes and 15,000 members (a master and two replicas per shard), built directly."""
    nodes = []
    for z in range(zones):
        for i in range(nodes_per_zone):
            name = f"z{z}-n{i}"
            nodes.append(
                Node(
                    name=name,
                    allocatable=Resources(cpu=64000, memory=256 * GI, pods=110),
                    zone=f"z{z}",
                    rack=f"z{z}/r{i % 40}",
                    host=name,
                )
            )
    members = []
    for s in range(shards):
        for k, role in enumerate((Role.MASTER, Role.REPLICA, Role.REPLICA)):
            n = nodes[(s + k * nodes_per_zone) % len(nodes)]
            pod = Pod(
                namespace="default",
                name=f"s{s}-{k}",
                node_name=n.name,
                phase="Running",
                requests=Resources(cpu=500, memory=GI, pods=1),
            )
            members.append(Member(pod=pod, cluster=f"default/c{s % 50}", shard=str(s), role=role))
    others = [
        Pod(
            namespace="o",
            name=f"o{i}",
            node_name=n.name,
            requests=Resources(cpu=100, memory=GI, pods=1),
        )
        for i, n in enumerate(nodes)
    ]
    return Snapshot(nodes=tuple(nodes), members=tuple(members), other_pods=tuple(others))


def test_checker_handles_5000_nodes_and_15000_pods_in_seconds() -> None:
    snap = big_cluster()
    policy = make_policy({"survive": "zone"})
    moved = {m.key: snap.nodes[-1 - i].name for i, m in enumerate(snap.members[:50])}
    plan = plan_for(snap, moved)
    start = time.perf_counter()
    violations = check_plan(snap, policy, plan)
    current = audit(snap, policy)
    evaluate_objective(snap, policy, plan)
    worst_domain_loss(snap, policy, plan)
    elapsed = time.perf_counter() - start
    assert elapsed < 10, f"took {elapsed:.1f}s"
    # the generated layout is clean; the 50 moves (all into zone z2) break rules only around them
    assert current == []
    assert violations
    assert all(set(v.pods) & set(moved) for v in violations)
