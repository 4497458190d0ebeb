"""Why a pod is not placed, in words a user can act on (solver/solve.py, solver/explain.py).

Each test states the message the plan owes its reader.
"""

import re

from models.plan import Plan
from models.policy import Policy
from solver.solve import SolveOptions, solve
from tests.kube_dicts import node, redis_pod, snapshot

OPTIONS = SolveOptions(time_limit=5, workers=1)
SHARD = re.compile(r"default/[a-z]+/\d+")


def three_nodes() -> list[dict[str, object]]:
    return [node(f"n{i}", "abc"[i], f"r{i}") for i in range(3)]


def survive_zone_with_two_masters() -> Plan:
    """Two shards of two in two zones: with survive zone, losing either zone leaves 1 of 2."""
    nodes = [node(f"n{i}", "ab"[i % 2], f"r{i}") for i in range(4)]
    pods = [redis_pod(f"s-{s}-{k}", "s", s, None) for s in range(2) for k in range(2)]
    policy = Policy.model_validate({"rules": {"survive": "zone"}})
    return solve(snapshot(nodes, pods, policy), policy, "place", OPTIONS)


def masters_beyond_nodes() -> Plan:
    """Five one-pod shards, three nodes, one master per node: two shards cannot be placed."""
    pods = [redis_pod(f"c-{s}-0", "c", s, None) for s in range(5)]
    return solve(snapshot(three_nodes(), pods), Policy(), "place", OPTIONS)


def test_each_pod_is_told_about_its_own_shard() -> None:
    plan = survive_zone_with_two_masters()
    shard_of = {a.pod: f"{a.cluster}/{a.shard}" for a in plan.assignments}
    assert plan.unplaced
    for u in plan.unplaced:
        named = set(SHARD.findall(u.reason))
        assert not named or shard_of[u.pod] in named, (u.pod, u.reason)


def test_a_shard_with_more_members_than_hosts_says_how_many_it_needs() -> None:
    pods = [redis_pod(f"big-{k}", "big", 0, None) for k in range(41)]
    plan = solve(snapshot(three_nodes(), pods), Policy(), "place", OPTIONS)
    assert len(plan.unplaced) == 41
    for u in plan.unplaced:
        assert "41 distinct hosts" in u.reason and re.search(r"\b3\b", u.reason), u.reason


def test_survive_with_two_masters_says_a_majority_is_impossible() -> None:
    plan = survive_zone_with_two_masters()
    assert plan.unplaced
    for u in plan.unplaced:
        assert "2 masters can never keep a majority after losing one" in u.reason, u.reason
        assert "at least 3 masters" in u.reason and "master-exclusivity" not in u.reason


def test_conflicting_rules_fill_the_explanation() -> None:
    """A conflict is said in the plan too, not only per pod."""
    plan = masters_beyond_nodes()
    assert len(plan.unplaced) == 2
    assert plan.explanation
    assert any("master-exclusivity" in line for line in plan.explanation)
    assert plan.to_json_dict()["explanation"] == plan.explanation


def test_a_pod_no_node_accepts_gets_the_filter_tally() -> None:
    """kube-scheduler's style of tally, per pod."""
    pods = [redis_pod("huge-0-0", "huge", 0, None, memory="64Gi")]
    plan = solve(snapshot(three_nodes(), pods), Policy(), "place", OPTIONS)
    [u] = plan.unplaced
    assert "0/3 nodes are available: 3 insufficient memory" in u.reason


def _shards_left_out(plan: Plan, shards: frozenset[str]) -> set[str]:
    return set(shards) - {f"{a.cluster}/{a.shard}" for a in plan.assignments if a.node}


def test_a_conflict_among_shards_explained_before_is_said_short() -> None:
    """The binder retries a shard that did not fit every few seconds; it names the shards not
    yet explained, and a conflict among the others gets the short reason, without a model of
    its own."""
    pods = [redis_pod(f"c-{s}-0", "c", s, None) for s in range(5)]
    every = frozenset(f"default/c/{s}" for s in range(5))
    long = solve(
        snapshot(three_nodes(), pods),
        Policy(),
        "place",
        SolveOptions(time_limit=5, workers=1, explain_shards=every),
    )
    left_out = _shards_left_out(long, every)
    assert len(left_out) == 2
    assert any("master-exclusivity" in line for line in long.explanation)
    short = solve(
        snapshot(three_nodes(), pods),
        Policy(),
        "place",
        SolveOptions(time_limit=5, workers=1, explain_shards=every - left_out),
    )
    assert _shards_left_out(short, every) == left_out
    assert not any("master-exclusivity" in line for line in short.explanation)
    for u in short.unplaced:
        assert u.reason.startswith("not placed: no plan places more than 3 of the 5"), u.reason


def test_a_shard_no_node_can_take_a_master_for_says_so_without_a_conflict_model() -> None:
    """Every node with room holds its one master already: no placement of the batch changes
    that, so the reason says it at once rather than as a conflict found by a model."""
    running = [redis_pod(f"c-{s}-0", "c", s, "master", node=f"n{s}") for s in range(3)]
    pods = [*running, redis_pod("d-0-0", "d", 0, None), redis_pod("d-0-1", "d", 0, None)]
    plan = solve(snapshot(three_nodes(), pods), Policy(), "place", OPTIONS)
    assert {u.pod for u in plan.unplaced} == {"default/d-0-0", "default/d-0-1"}
    for u in plan.unplaced:
        assert u.reason.startswith("shard default/d/0 needs a master, and none of the 3 node(s)")
        assert "can take one: each holds 1 already" in u.reason, u.reason
    assert not any("master-exclusivity" in line for line in plan.explanation)


def test_rebalance_may_move_masters_so_it_leaves_the_master_room_to_the_model() -> None:
    running = [redis_pod(f"c-{s}-0", "c", s, "master", node=f"n{s}") for s in range(3)]
    pods = [*running, redis_pod("d-0-0", "d", 0, None), redis_pod("d-0-1", "d", 0, None)]
    plan = solve(snapshot(three_nodes(), pods), Policy(), "rebalance", OPTIONS)
    assert {u.pod for u in plan.unplaced} == {"default/d-0-0", "default/d-0-1"}
    for u in plan.unplaced:
        assert "needs a master" not in u.reason and "master-exclusivity" in u.reason, u.reason


def test_a_node_left_with_room_for_a_master_leaves_the_conflict_to_the_model() -> None:
    """With one node free of masters, two new shards conflict over it: not a shard's own
    reason, so the model names the rules."""
    running = [redis_pod(f"c-{s}-0", "c", s, "master", node=f"n{s}") for s in range(2)]
    new = [redis_pod(f"d-{s}-0", "d", s, None) for s in range(2)]
    plan = solve(snapshot(three_nodes(), [*running, *new]), Policy(), "place", OPTIONS)
    [u] = plan.unplaced
    assert "needs a master" not in u.reason
    assert any("master-exclusivity" in line for line in plan.explanation)


def test_shards_of_different_kinds_count_the_hosts_their_own_pods_may_use() -> None:
    """Which nodes accept a pod is worked out once per kind of pod: a shard with a nodeSelector
    and one without each count their own hosts."""
    nodes = [node("n0", "a", "r0", labels={"disk": "ssd"}), *three_nodes()[1:]]
    picky = [redis_pod(f"p-0-{k}", "p", 0, None, nodeSelector={"disk": "ssd"}) for k in range(2)]
    big = [redis_pod(f"b-0-{k}", "b", 0, None) for k in range(4)]
    plan = solve(snapshot(nodes, [*picky, *big]), Policy(), "place", OPTIONS)
    reasons = {u.pod: u.reason for u in plan.unplaced}
    assert len(reasons) == 6
    assert "needs 2 distinct hosts" in reasons["default/p-0-0"], reasons["default/p-0-0"]
    assert "1 host accepts its pods" in reasons["default/p-0-0"]
    assert "needs 4 distinct hosts" in reasons["default/b-0-0"], reasons["default/b-0-0"]
    assert "3 hosts accept its pods" in reasons["default/b-0-0"]


def test_survive_over_too_few_zones_counts_them_in_words_that_agree() -> None:
    """Three shards of two whose nodes are all in one zone: the count and its words agree
    ("1 zone accepts", never "1 zones accept")."""
    nodes = [node(f"n{i}", "a", f"r{i}") for i in range(6)]
    pods = [redis_pod(f"z-{s}-{k}", "z", s, None) for s in range(3) for k in range(2)]
    policy = Policy.model_validate({"rules": {"survive": "zone"}})
    plan = solve(snapshot(nodes, pods, policy), policy, "place", OPTIONS)
    assert len(plan.unplaced) == 6
    for u in plan.unplaced:
        assert "in at least 3 zones" in u.reason, u.reason
        assert "1 zone accepts its pods" in u.reason, u.reason
