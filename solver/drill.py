"""The failure drill: what losing topology domains does to each Redis cluster, on a final placement.

Redis Cluster's own rules decide the outcome, per Redis cluster with a member in the lost
domain(s):

* a shard with no member left is lost (its data goes with the domain);
* a failover needs a strict majority of the cluster's masters to authorize it, so when the
  majority is lost no replica is promoted and every shard whose master was lost stays down;
* otherwise a lost master is replaced by one of its reachable replicas: Redis ranks replicas by
  replication offset (the most up to date is elected first). With offsets read from Redis the
  highest wins; without them every reachable replica is as good, and the first by pod name is
  reported;
* the cluster answers queries (``state: ok``) only with its majority and every shard serving
  (``cluster-require-full-coverage yes``, Redis' default).

Pure: the placement comes from the snapshot or a plan, the offsets and slots (if any) are given.
"""

import re
from collections import Counter, defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from models.cluster import Node, Role
from models.drill import (
    ClusterOutcome,
    DrillReport,
    FailedDomain,
    Failure,
    Promotion,
    ShardOutcome,
)
from models.errors import InputError
from models.plan import Assignment, Plan, SkippedInput
from models.policy import LEVELS, Level
from models.snapshot import Snapshot
from models.words import first_few
from solver.check import FinalMember, final_members, keep_plan

Outage = tuple[FailedDomain, ...]
"""Domains that fail together."""

RULE_BY_NAME = "any reachable replica (the first by pod name): replication offsets were not read"
RULE_BY_OFFSET = "the reachable replica with the highest replication offset, as Redis elects"


def node_in(node: Node, failed: FailedDomain) -> bool:
    """Whether the node lies in the failed domain (a host is named by its host label or node name)."""
    if failed.level == "host":
        return failed.domain in (node.host, node.name)
    return node.domain(failed.level) == failed.domain


def natural(text: str) -> tuple[tuple[int, int | str], ...]:
    """Sort key that puts shard 2 before shard 10."""
    return tuple((0, int(t)) if t.isdigit() else (1, t) for t in re.split(r"(\d+)", text) if t)


def _nodes_down(snapshot: Snapshot) -> dict[tuple[str, str], set[str]]:
    """(level, domain) -> the names of the nodes in it; a host also answers to its node name."""
    index: dict[tuple[str, str], set[str]] = defaultdict(set)
    for n in snapshot.nodes:
        for level in LEVELS:
            domain = n.domain(level)
            if domain is not None:
                index[(level, domain)].add(n.name)
        index[("host", n.name)].add(n.name)
    return index


def domains_at(snapshot: Snapshot, level: Level) -> list[str]:
    return sorted({d for n in snapshot.nodes if (d := n.domain(level)) is not None})


def resolve_outage(snapshot: Snapshot, pairs: Sequence[tuple[str, str]]) -> Outage:
    """``[("zone", "zone-a"), ...]`` as an outage; an unknown level or domain is an InputError."""
    failed: list[FailedDomain] = []
    for level, domain in pairs:
        if level not in LEVELS:
            raise InputError(
                f"unknown level {level!r} (one of {', '.join(LEVELS)})", obj="--fail", field=level
            )
        item = FailedDomain(level=level, domain=domain)
        if not any(node_in(n, item) for n in snapshot.nodes):
            known = domains_at(snapshot, item.level)
            shown = first_few(known, 10)
            raise InputError(
                f"no node is in {level} {domain!r} (known: {shown or 'none'})",
                obj="--fail",
                field=level,
            )
        failed.append(item)
    return tuple(failed)


@dataclass
class _Placement:
    """The drilled placement, indexed once for every outage."""

    snapshot: Snapshot
    finals: list[FinalMember]
    alive: dict[str, Node] = field(default_factory=dict)
    """Pod key -> its node, for members on a node that exists."""
    by_node: dict[str, list[FinalMember]] = field(default_factory=lambda: defaultdict(list))
    by_shard: dict[str, list[FinalMember]] = field(default_factory=lambda: defaultdict(list))
    shards_of: dict[str, list[str]] = field(default_factory=lambda: defaultdict(list))
    masters_total: Counter[str] = field(default_factory=Counter)
    masters_alive: Counter[str] = field(default_factory=Counter)
    zone_masters: dict[str, Counter[str]] = field(default_factory=lambda: defaultdict(Counter))

    @classmethod
    def of(cls, snapshot: Snapshot, plan: Plan) -> "_Placement":
        nodes = snapshot.node_by_name
        placed = [f for f in final_members(snapshot, plan) if f.node is not None]
        p = cls(snapshot, placed)
        for f in placed:
            if f.shard not in p.by_shard:
                p.shards_of[f.cluster].append(f.shard)
            p.by_shard[f.shard].append(f)
            node = nodes.get(f.node or "")
            if f.role is Role.MASTER:
                p.masters_total[f.cluster] += 1
            if node is None:
                continue  # bound to a node that is gone: down already
            p.alive[f.key] = node
            p.by_node[node.name].append(f)
            if f.role is Role.MASTER:
                p.masters_alive[f.cluster] += 1
                p.zone_masters[f.cluster][node.zone or ""] += 1
        return p


def absent_nodes(snapshot: Snapshot, plan: Plan) -> list[Assignment]:
    """The plan's assignments to a node the snapshot does not have, in the plan's order.

    A pod the snapshot itself binds to a node it lacks may stay there in the plan (``plan`` keeps
    it so): that is this snapshot's own placement, not another cluster's."""
    nodes = snapshot.node_by_name
    bound = {m.key: m.pod.node_name for m in (*snapshot.members, *snapshot.skipped_members)}
    return [
        a
        for a in plan.assignments
        if a.node is not None and a.node not in nodes and bound.get(a.pod) != a.node
    ]


def absent_pods(snapshot: Snapshot, plan: Plan) -> list[str]:
    """The pods the plan assigns that the snapshot does not hold, each once, in the plan's order."""
    known = {m.key for m in (*snapshot.members, *snapshot.skipped_members)}
    return list(dict.fromkeys(a.pod for a in plan.assignments if a.pod not in known))


def _placed(snapshot: Snapshot, plan: Plan) -> set[tuple[str, str | None, Role]]:
    return {(f.key, f.node, f.role) for f in final_members(snapshot, plan)}


def unchanged(snapshot: Snapshot, plan: Plan) -> str:
    """Why the plan's placement is the running one, in words, or "" when it changes something.

    Its drill is then the running placement's, and is said to be: never "a plan's placement"
    for a plan that assigns nothing (members it omits stay where they run)."""
    if _placed(snapshot, plan) != _placed(snapshot, keep_plan(snapshot)):
        return ""
    if not plan.assignments:
        return "the plan assigns no pod, so it moves nothing"
    return "the plan moves no pod and changes no role"


def every_domain(snapshot: Snapshot, plan: Plan | None, level: Level) -> list[Outage]:
    """One outage per domain at ``level`` that holds a Redis pod of the drilled placement."""
    p = _Placement.of(snapshot, plan or keep_plan(snapshot))
    held = {d for node in p.alive.values() if (d := node.domain(level)) is not None}
    return [(FailedDomain(level=level, domain=d),) for d in sorted(held)]


def _promote(
    candidates: list[FinalMember], offsets: Mapping[str, int] | None
) -> tuple[FinalMember, int | None]:
    if offsets:
        best = min(candidates, key=lambda f: (-offsets.get(f.key, -1), f.key))
        return best, offsets.get(best.key)
    return min(candidates, key=lambda f: f.key), None


def _shard_id(f: FinalMember) -> str:
    return f.member.shard


def _outcome(
    p: _Placement,
    cluster: str,
    down: set[str],
    offsets: Mapping[str, int] | None,
    slots: Mapping[str, int] | None,
) -> ClusterOutcome:
    total = p.masters_total[cluster]
    zones = Counter(p.zone_masters[cluster])
    hit = [f for name in sorted(down) for f in p.by_node.get(name, []) if f.cluster == cluster]
    lost_masters = 0
    for f in hit:
        if f.role is Role.MASTER:
            lost_masters += 1
            zones[p.alive[f.key].zone or ""] -= 1
    majority = 2 * (p.masters_alive[cluster] - lost_masters) > total
    promotions: list[Promotion] = []
    affected: list[ShardOutcome] = []
    unavailable: list[str] = []
    slots_down = 0
    shards_lost = 0
    for shard in sorted({f.shard for f in hit}, key=natural):
        members = p.by_shard[shard]
        alive = [f for f in members if f.key in p.alive]
        left = [f for f in alive if p.alive[f.key].name not in down]
        master = next((f for f in members if f.role is Role.MASTER), None)
        master_up_before = master is not None and master.key in p.alive
        master_up = master is not None and any(f.key == master.key for f in left)
        shard_slots = slots.get(master.key) if slots is not None and master is not None else None
        outcome = ShardOutcome(
            shard=_shard_id(members[0]),
            members=len(members),
            members_left=len(left),
            master_lost=master_up_before and not master_up,
            available=True,
            slots=shard_slots,
        )
        reason = ""
        if not left:
            shards_lost += 1
            reason = "no member left"
        elif not master_up_before:
            reason = "no serving master before the failure"
        elif not master_up:
            replicas = [f for f in left if f.role is Role.REPLICA]
            if not replicas:
                reason = "master lost and no replica left"
            elif not majority:
                reason = "master lost; no master majority left to authorize a failover"
            else:
                assert master is not None
                chosen, offset = _promote(replicas, offsets)
                outcome = outcome.model_copy(update={"promoted": chosen.key})
                promotions.append(
                    Promotion(shard=outcome.shard, from_=master.key, to=chosen.key, offset=offset)
                )
                zones[p.alive[chosen.key].zone or ""] += 1
        if reason:
            outcome = outcome.model_copy(update={"available": False, "reason": reason})
            unavailable.append(outcome.shard)
            slots_down += shard_slots or 0
        affected.append(outcome)
    return ClusterOutcome(
        cluster=cluster,
        masters=total,
        masters_lost=lost_masters,
        majority_kept=majority,
        shards=len(p.shards_of[cluster]),
        shards_lost=shards_lost,
        promotions=promotions,
        unavailable_shards=unavailable,
        slots_unavailable=slots_down if slots is not None else None,
        state="ok" if majority and not unavailable else "fail",
        masters_per_zone={z: n for z, n in sorted(zones.items()) if n > 0},
        affected_shards=affected,
    )


def _damage(failure: Failure) -> tuple[float, ...]:
    """Worst first: majorities lost, shards lost, shards unavailable, share of masters lost."""
    clusters = failure.clusters
    return (
        -sum(not c.majority_kept for c in clusters),
        -sum(c.shards_lost for c in clusters),
        -sum(len(c.unavailable_shards) for c in clusters),
        -max((c.masters_lost / c.masters for c in clusters if c.masters), default=0.0),
        -sum(c.masters_lost for c in clusters),
    )


def drill(
    snapshot: Snapshot,
    outages: Sequence[Outage],
    plan: Plan | None = None,
    *,
    offsets: Mapping[str, int] | None = None,
    slots: Mapping[str, int] | None = None,
    roles: str = "labels",
) -> DrillReport:
    """Every outage drilled on the placement (the running pods, or ``plan``'s), worst first.

    ``offsets``: pod key -> replication offset (replicas), ``slots``: pod key -> hash slots
    served (masters), both as read from Redis; without them promotions go by pod name and slots
    are not counted.
    """
    p = _Placement.of(snapshot, plan or keep_plan(snapshot))
    index = _nodes_down(snapshot)
    failures = []
    for outage in outages:
        down = set().union(*(index.get((d.level, d.domain), set()) for d in outage))
        clusters = sorted(
            {f.cluster for name in down for f in p.by_node.get(name, [])},
        )
        failures.append(
            Failure(
                level="+".join(d.level for d in outage),
                domain="+".join(d.domain for d in outage),
                domains=list(outage),
                nodes_lost=sorted(down),
                clusters=[_outcome(p, k, down, offsets, slots) for k in clusters],
            )
        )
    failures.sort(key=lambda f: (_damage(f), f.level, f.domain))
    placed = {f.key for f in p.finals}
    note = unchanged(snapshot, plan) if plan is not None else ""
    return DrillReport(
        placement="plan" if plan is not None and not note else "running",
        placement_note=note,
        roles="redis" if roles == "redis" else "labels",
        promotion_rule=RULE_BY_OFFSET if offsets else RULE_BY_NAME,
        slots="redis" if slots is not None else "not read",
        failures=failures,
        members=len(placed),
        left_out=sorted(m.key for m in snapshot.members if m.key not in placed),
        skipped=[
            SkippedInput(object=i.object, message=i.message, severity=i.severity)
            for i in snapshot.issues
        ],
    )
