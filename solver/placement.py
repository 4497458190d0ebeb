"""A node-level placement and how it turns into a Plan; shared by the CP-SAT path and greedy."""

from dataclasses import dataclass, field
from functools import lru_cache

from models.cluster import Member, Role
from models.plan import Action, Assignment, Failover, Mode, Plan, SkippedInput, Status, Unplaced
from models.snapshot import Snapshot


@dataclass
class Placement:
    """Where each managed member ends up, and with which role. Missing key = unplaced."""

    node: dict[str, str] = field(default_factory=dict)
    role: dict[str, Role] = field(default_factory=dict)
    unplaced: dict[str, str] = field(default_factory=dict)
    explanation: list[str] = field(default_factory=list)
    """Why the unplaced shards cannot be placed together, when a solver could tell."""


def current_role(member: Member) -> Role:
    return member.role if member.role is not None else Role.REPLICA


@lru_cache(maxsize=1 << 17)
def _kept(pod: str, node: str, role: Role, cluster: str, shard: str) -> Assignment:
    """A running member left where it is, built once: the binder's every batch lists the same
    15,000 running members, and building their assignments was a fifth of a small solve.
    Shared between plans, so never changed in place (nothing does)."""
    return Assignment.model_construct(
        pod=pod,
        node=node,
        role=role.value,
        cluster=cluster,
        shard=shard,
        action="keep",
        from_node=None,
    )


def clear_caches() -> None:
    """Forget the kept assignments (a benchmark row must not reuse another's)."""
    _kept.cache_clear()


def to_plan(snapshot: Snapshot, placement: Placement, mode: Mode, status: Status) -> Plan:
    """Every managed member as an assignment; one pass over members, since a plan lists them all."""
    assignments: list[Assignment] = []
    failovers: list[Failover] = []
    placed_nodes, placed_roles = placement.node, placement.role
    targets: set[str] = set()  # shards where a running member is made master: failover candidates
    for member in snapshot.members:
        key = member.key
        current = member.pod.node_name
        node = placed_nodes.get(key)
        given = placed_roles.get(key)
        role = given or member.role or Role.REPLICA
        if given is Role.MASTER and current is not None:
            targets.add(member.shard_key)
        from_node = None
        action: Action
        if current is None:
            action = "place"
        elif node is not None and node != current:
            action, from_node = "move", current
        else:
            assignments.append(_kept(key, current, role, member.cluster, member.shard))
            continue
        # Built without validation: every field comes from parsed, validated members.
        assignments.append(
            Assignment.model_construct(
                pod=key,
                node=node,
                role=role.value,
                cluster=member.cluster,
                shard=member.shard,
                action=action,
                from_node=from_node,
            )
        )
    for shard_key, members in snapshot.shards.items() if targets else ():
        if shard_key not in targets:
            continue
        old = next((m for m in members if m.role is Role.MASTER and not m.pod.pending), None)
        new = next((m for m in members if placed_roles.get(m.key) is Role.MASTER), None)
        if old is not None and new is not None and old.key != new.key and not new.pod.pending:
            failovers.append(
                Failover(cluster=old.cluster, shard=old.shard, **{"from": old.key}, to=new.key)
            )
    return Plan(
        status=status,
        mode=mode,
        assignments=assignments,
        failovers=failovers,
        unplaced=[Unplaced(pod=k, reason=r) for k, r in sorted(placement.unplaced.items())],
        skipped=[
            SkippedInput(object=i.object, message=i.message, severity=i.severity)
            for i in snapshot.issues
        ],
    )
