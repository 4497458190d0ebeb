"""A node-level placement and how it turns into a Plan; shared by the CP-SAT path and greedy."""

from dataclasses import dataclass, field

from models.cluster import Member, Role
from models.plan import Assignment, Failover, Mode, Plan, SkippedInput, Status, Unplaced
from models.snapshot import Snapshot


@dataclass
class Placement:
    """Where each managed member ends up, and with which role. Missing key = unplaced."""

    node: dict[str, str] = field(default_factory=dict)
    role: dict[str, Role] = field(default_factory=dict)
    unplaced: dict[str, str] = field(default_factory=dict)


def current_role(member: Member) -> Role:
    return member.role if member.role is not None else Role.REPLICA


def to_plan(snapshot: Snapshot, placement: Placement, mode: Mode, status: Status) -> Plan:
    assignments: list[Assignment] = []
    failovers: list[Failover] = []
    for member in snapshot.members:
        node = placement.node.get(member.key)
        role = placement.role.get(member.key, current_role(member))
        if member.pod.pending:
            action = "place"
        elif node is not None and node != member.pod.node_name:
            action = "move"
        else:
            action = "keep"
            node = member.pod.node_name
        assignments.append(
            Assignment(
                pod=member.key,
                node=node,
                role=role.value,
                cluster=member.cluster,
                shard=member.shard,
                action=action,
                from_node=member.pod.node_name if action == "move" else None,
            )
        )
    for members in snapshot.shards.values():
        old = next((m for m in members if m.role is Role.MASTER and not m.pod.pending), None)
        new = next((m for m in members if placement.role.get(m.key) is Role.MASTER), None)
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
