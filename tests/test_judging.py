"""Incremental judging gives the full checker's verdict: on random clusters, through random
sequences of plans, node changes, pod deletions and additions, ``RunningVerdict`` (told only what
each change touched, or told it by ``warm.changes`` on snapshots that share their unchanged
objects) and ``check.assess`` agree on violations, objective terms and worst domain losses."""

from collections.abc import Callable
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from models.cluster import Member
from models.kube_objects import ParseCache, build_snapshot
from models.plan import Assignment, Plan, Unplaced
from models.policy import Policy
from models.snapshot import Snapshot
from solver.check import assess
from solver.judging import RunningVerdict
from solver.levels.shapes import build_shapes
from solver.levels.standing import StandingCache
from solver.warm import Warm, changes
from tests.kube_dicts import node, other_pod, redis_pod, snapshot

SETTINGS = settings(
    max_examples=150, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow]
)
ZONES = ("a", "b", "c", None)
Draw = Callable[..., Any]
"""``st.composite``'s draw or ``st.data().draw``."""


def _node(draw: Draw, name: str) -> dict[str, Any]:
    zone = draw(st.sampled_from(ZONES))
    return node(
        name,
        zone,
        draw(st.sampled_from(["r0", "r1", None])),
        cpu=draw(st.sampled_from(["1", "2", "8"])),
        memory=draw(st.sampled_from(["2Gi", "4Gi", "16Gi"])),
        taints=draw(st.sampled_from([(), ("dedicated=x:NoSchedule",)])),
        ready=draw(st.booleans()) or draw(st.booleans()),
        labels={"kubernetes.io/hostname": f"h{draw(st.integers(0, 5))}"},
    )


def _redis(draw: Draw, name: str, shard: int, nodes: list[str]) -> dict[str, Any]:
    where = draw(st.sampled_from([None, *nodes, "gone"]))
    role = draw(st.sampled_from(["master", "replica", None])) if where else None
    return redis_pod(
        name,
        f"c{shard % 2}",
        shard,
        role if where else draw(st.sampled_from(["master", "replica", None])),
        node=where,
        memory=draw(st.sampled_from(["1Gi", "3Gi"])),
    )


@st.composite
def policies(draw: st.DrawFn) -> Policy:
    strengths = st.sampled_from(["required", "preferred", "ignore"])
    return Policy.model_validate(
        {
            "rules": {
                "maxMastersPerNode": draw(st.integers(1, 2)),
                "survive": draw(st.sampled_from(["none", "host", "rack", "zone"])),
                "replicaSeparation": {"rack": draw(strengths), "zone": draw(strengths)},
            }
        }
    )


def _shard_of(snap: Snapshot, pod_key: str) -> set[str]:
    """The shard a pod event names (its labels say it, whether or not the shard is planned)."""
    return {m.shard_key for m in (*snap.members, *snap.skipped_members) if m.key == pod_key}


def _plan(draw: Draw, snap: Snapshot) -> Plan:
    names = [n.name for n in snap.nodes]
    members: list[Member] = list(snap.members)
    assignments = []
    for m in draw(st.lists(st.sampled_from(members), max_size=6)) if members else []:
        assignments.append(
            Assignment(
                pod=m.key,
                node=draw(st.sampled_from([None, m.pod.node_name, *names, "gone"])),
                role=draw(st.sampled_from(["master", "replica"])),
                cluster=m.cluster,
                shard=m.shard,
                action=draw(st.sampled_from(["place", "move", "keep"])),
            )
        )
    unplaced = [
        Unplaced(pod=m.key, reason="not placed")
        for m in (draw(st.lists(st.sampled_from(members), max_size=2)) if members else [])
    ]
    return Plan(status="FEASIBLE", assignments=assignments, unplaced=unplaced)


def _same_standing(cache: StandingCache, snap: Snapshot) -> None:
    kept, walked = cache.standing(snap), build_shapes(snap, partial=False).standing
    assert kept is not None
    assert kept.used == walked.used
    assert kept.masters_on == walked.masters_on
    assert kept.masters == walked.masters
    assert kept.pairs == walked.pairs


def _agree(verdict: RunningVerdict, snap: Snapshot, policy: Policy, plan: Plan) -> None:
    full = assess(snap, policy, plan)
    incremental = verdict.assess(snap, policy, plan)
    assert incremental.violations == full.violations
    assert incremental.terms == full.terms
    assert incremental.worst_domain_loss == full.worst_domain_loss


@given(policies(), st.data())
@SETTINGS
def test_incremental_verdict_is_the_full_one(policy: Policy, data: st.DataObject) -> None:
    draw = data.draw
    nodes = {f"n{i}": _node(draw, f"n{i}") for i in range(draw(st.integers(1, 6)))}
    pods: dict[str, dict[str, Any]] = {}
    for s in range(draw(st.integers(1, 4))):
        for r in range(draw(st.integers(1, 3))):
            pods[f"p{s}-{r}"] = _redis(draw, f"p{s}-{r}", s, list(nodes))
    if draw(st.booleans()):
        pods["web"] = other_pod("web", draw(st.sampled_from(list(nodes))), "1", "1Gi")
    snap = snapshot(nodes.values(), pods.values(), policy)
    verdict = RunningVerdict(snap, policy)
    standing = StandingCache(snap)
    warm = Warm(policy)
    warm.prepare(snap, policy)
    _agree(verdict, snap, policy, Plan(status="FEASIBLE"))
    _same_standing(standing, snap)
    # As the binder has it: every object versioned and parsed once (``ParseCache``), so the
    # snapshots share what did not change and ``changes`` tells the caches what did.
    versions = iter(range(1, 10**6))
    parse_cache = ParseCache()
    bound = Warm(policy)

    def versioned() -> Snapshot:
        for obj in [*nodes.values(), *pods.values()]:
            obj["metadata"].setdefault("resourceVersion", str(next(versions)))
        return build_snapshot([*nodes.values(), *pods.values()], policy, parse_cache)

    bound.prepare(versioned(), policy)
    for step in range(draw(st.integers(1, 6))):
        kind = draw(st.sampled_from(["plan", "node", "drop node", "delete", "add", "bind"]))
        touched_nodes: set[str] = set()
        pod_keys: list[str] = []
        if kind == "node":
            name = draw(st.sampled_from([*nodes, f"new{step}"]))
            nodes[name] = _node(draw, name)
            touched_nodes.add(name)
        elif kind == "drop node" and len(nodes) > 1:
            name = draw(st.sampled_from(list(nodes)))
            del nodes[name]
            touched_nodes.add(name)
        elif kind in ("delete", "bind") and pods:
            name = draw(st.sampled_from(list(pods)))
            pod = pods.pop(name)
            pod_keys.append(f"{pod['metadata']['namespace']}/{name}")
            if kind == "bind":
                pod = _redis(draw, name, draw(st.integers(0, 4)), list(nodes))
                pods[name] = pod
                pod_keys.append(f"default/{name}")
        elif kind == "add":
            name = f"q{step}"
            pods[name] = _redis(draw, name, draw(st.integers(0, 4)), list(nodes))
            pod_keys.append(f"default/{name}")
        if kind != "plan":
            new = snapshot(nodes.values(), pods.values(), policy)
            shards = {s for k in pod_keys for s in _shard_of(snap, k) | _shard_of(new, k)}
            snap = new
            # As ``warm.changes`` says it: the Nodes replaced, and the shards of the pods that
            # changed (the nodes those pods left or joined are not named).
            verdict.update(snap, nodes=touched_nodes, shards=shards)
            standing.update(snap, nodes=touched_nodes, shards=shards)
            warm.prepare(snap, policy)
            _agree(verdict, snap, policy, Plan(status="FEASIBLE"))
            _same_standing(standing, snap)
            shared = versioned()
            bound.prepare(shared, policy)
            assert bound.verdict is not None and bound.standing is not None
            _agree(bound.verdict, shared, policy, Plan(status="FEASIBLE"))
            _same_standing(bound.standing, shared)
        plan = _plan(draw, snap)
        _agree(verdict, snap, policy, plan)
        assert warm.verdict is not None and warm.standing is not None
        _agree(warm.verdict, snap, policy, plan)
        _same_standing(warm.standing, snap)


def test_a_verdict_on_another_snapshot_is_the_full_one() -> None:
    policy = Policy()
    nodes = [node("n0", "a", "r0"), node("n1", "b", "r1")]
    first = snapshot(nodes, [redis_pod("p0", "c", 0, "master", node="n0")], policy)
    other = snapshot(
        nodes,
        [
            redis_pod("p0", "c", 0, "master", node="n0"),
            redis_pod("p1", "c", 0, "replica", node="n0"),
        ],
        policy,
    )
    verdict = RunningVerdict(first, policy)
    judged = verdict.assess(other, policy, Plan(status="FEASIBLE"))
    assert judged == assess(other, policy, Plan(status="FEASIBLE"))
    assert any(v.rule == "shard-spread" for v in judged.violations)


def test_changes_are_the_objects_rebuilt() -> None:
    """Snapshots that share parsed objects differ exactly where a pod or node was replaced."""
    policy = Policy()
    nodes = [node(f"n{i}", "ab"[i % 2], f"r{i}") for i in range(4)]
    pods = [
        redis_pod(f"p{s}-{r}", "c", s, None, node=f"n{(s + r) % 4}")
        for s in range(3)
        for r in range(2)
    ]
    for version, obj in enumerate([*nodes, *pods], start=1):
        obj["metadata"]["resourceVersion"] = str(version)
    cache = ParseCache()
    first = build_snapshot([*nodes, *pods], policy, cache)
    again = build_snapshot([*nodes, *pods], policy, cache)
    assert changes(first, again) == (set(), set())
    moved = redis_pod("p1-0", "c", 1, None, node="n3")
    moved["metadata"]["resourceVersion"] = "100"
    relabelled = node("n0", "b", "r0")
    relabelled["metadata"]["resourceVersion"] = "101"
    objects = [
        relabelled,
        *nodes[1:],
        *[moved if p["metadata"]["name"] == "p1-0" else p for p in pods],
    ]
    later = build_snapshot(objects, policy, cache)
    # n0's Node was replaced; p1-0 moved from n1 to n3, which is its shard's change alone.
    assert changes(again, later) == ({"n0"}, {"default/c/1"})
