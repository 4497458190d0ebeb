"""Members an ordered shard will have but does not have yet, as stand-ins to plan for.

An OrderedReady StatefulSet makes pod N+1 only once pod N is Ready, and the OT operator makes
the followers only once every leader is; holding the present members until the rest arrive
would wait forever. So the present ones are placed now, and every solve also places these
stand-ins, never enforced, so that room stays where the later members should go. They are
counted, not named: when a real member arrives it takes the place of one stand-in.
"""

from models.cluster import Member, Pod, Role
from models.snapshot import Snapshot

EXPECTED_MARK = "~expected-"
"""In a stand-in's pod name. ``~`` never occurs in a Kubernetes name, so no real pod collides."""


def is_expected(member: Member) -> bool:
    return EXPECTED_MARK in member.pod.name


def expected_members(snapshot: Snapshot) -> list[Member]:
    """Stand-ins for the missing members of every ordered shard whose size is known (its
    shards are grouped once per snapshot: the binder asks at every batch)."""
    out: list[Member] = []
    for shard_key, members in snapshot.shards.items():
        group = [m for m in members if not m.pod.deleting]
        if not group:
            continue
        template = group[0]
        size = max((m.shard_size or 0) for m in group)
        if not any(m.ordered for m in group) or size <= len(group):
            continue
        has_master = any(m.role is Role.MASTER for m in group)
        cluster = template.cluster.split("/", 1)[-1]
        for k in range(size - len(group)):
            pod = Pod(
                namespace=template.pod.namespace,
                name=f"{cluster}.{template.shard}{EXPECTED_MARK}{k}",
                uid=f"expected/{shard_key}/{k}",
                labels=template.pod.labels,
                requests=template.pod.requests,
                tolerations=template.pod.tolerations,
                node_selector=template.pod.node_selector,
                affinity_terms=template.pod.affinity_terms,
                scheduler_name=template.pod.scheduler_name,
            )
            out.append(
                Member(
                    pod=pod,
                    cluster=template.cluster,
                    shard=template.shard,
                    role=Role.REPLICA if has_master or k else None,
                    shard_size=size,
                    ordered=True,
                )
            )
    return out
