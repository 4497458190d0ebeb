"""Pending shards grouped by shape: shards that are interchangeable for every rule.

A batch of hundreds of new shards of one StatefulSet template is a handful of shapes, so the zone
and rack models count shards per shape and pattern instead of deciding each shard on its own: the
models grow with the topology, not with the batch.
"""

from collections import Counter
from dataclasses import dataclass, field

from models.cluster import Member, Node, Role
from models.snapshot import Snapshot
from solver.levels.rooms import Kind, kind_key


@dataclass(frozen=True)
class Fixed:
    """A member of the shard that stays where it runs."""

    member: Member
    node: Node
    role: Role


@dataclass
class PendingShard:
    key: str
    cluster: str
    pending: list[Member]
    """Members to place, in a stable order."""
    kinds: list[int]
    """Kind index of each pending member."""
    roles: list[Role | None]
    """Role of each pending member; None: undecided (one undecided member becomes master)."""
    fixed: list[Fixed]
    needs_master: bool
    """No master runs or is labelled: exactly one undecided member becomes master."""
    size: int
    """Members in all, fixed and pending."""


@dataclass
class Shape:
    index: int
    cluster: str
    slots: tuple[tuple[int, Role | None], ...]
    """(kind, role) of the pending members, sorted; role None is undecided."""
    needs_master: bool
    fixed: tuple[Fixed, ...]
    shards: list[PendingShard] = field(default_factory=list)

    @property
    def count(self) -> int:
        return len(self.shards)

    @property
    def pods(self) -> int:
        return len(self.slots)

    @property
    def fixed_master(self) -> Fixed | None:
        return next((f for f in self.fixed if f.role is Role.MASTER), None)


@dataclass
class Standing:
    """What stays where it runs, summed in one walk: a large running cluster is most of the
    input, and the levels only need these totals of it."""

    used: dict[str, list[int]] = field(default_factory=dict)
    """Per node: cpu, memory and pods of the managed members that stay."""
    masters_on: dict[str, int] = field(default_factory=dict)
    """Per node: masters that stay."""
    masters: list[tuple[str, Node]] = field(default_factory=list)
    """(Redis cluster, node) of every master that stays."""
    pairs: dict[str, int] = field(default_factory=lambda: {"rack": 0, "zone": 0})
    """Per level (rack, zone): replicas that stay in their staying master's domain."""
    zone_members: dict[tuple[str, str], int] = field(default_factory=dict)
    """Per (Redis cluster, zone): members that stay (a node with no zone label: "")."""


@dataclass
class Shapes:
    kinds: list[Kind]
    shapes: list[Shape]
    unplaceable: dict[str, str]
    """Shard key -> why no placement can be right for it (its roles are contradictory)."""
    standing: Standing


def _order(member: Member) -> tuple[int, str]:
    return (0 if member.role is Role.MASTER else 1 if member.role is None else 2, member.key)


def build_shapes(snapshot: Snapshot, partial: bool, standing: Standing | None = None) -> Shapes:
    """Kinds and shapes of the pending members in place mode: every running member stays.

    ``standing``, when given, is the snapshot's (solver/levels/standing.py keeps it across
    solves): only the shards with pending members are walked then."""
    nodes = snapshot.node_by_name
    kind_index: dict[tuple[object, ...], int] = {}
    kinds: list[Kind] = []
    walked = Standing() if standing is not None else None
    standing = standing if standing is not None else Standing()
    with_pending = {m.shard_key for m in snapshot.pending} if walked is not None else None
    by_shape: dict[tuple[object, ...], Shape] = {}
    shapes: list[Shape] = []
    unplaceable: dict[str, str] = {}
    for shard_key, members in snapshot.shards.items():
        if with_pending is not None and shard_key not in with_pending:
            continue
        staying, pending, running_masters = _walk(members, nodes, walked or standing)
        if not pending:
            continue
        fixed = [Fixed(m, node, role) for m, node, role in staying]
        labelled_masters = sum(1 for m in pending if m.role is Role.MASTER)
        masters = running_masters + labelled_masters
        undecided = [m for m in pending if m.role is None]
        if masters > 1:
            unplaceable[shard_key] = (
                f"shard {shard_key} would have {masters} masters: its labels name more than one"
            )
            continue
        if masters == 0 and not undecided:
            unplaceable[shard_key] = (
                f"shard {shard_key} has no master: no member is labelled master or left "
                "for the solver to choose"
            )
            continue
        needs_master = masters == 0
        pending.sort(key=_order)
        kind_of: list[int] = []
        roles: list[Role | None] = []
        for m in pending:
            key = kind_key(m.pod)
            k = kind_index.get(key)
            if k is None:
                k = kind_index[key] = len(kinds)
                kinds.append(Kind(k, key[0], m.pod))
            kind_of.append(k)
            roles.append(m.role if m.role is not None else None if needs_master else Role.REPLICA)
        shard = PendingShard(
            key=shard_key,
            cluster=members[0].cluster,
            pending=pending,
            kinds=kind_of,
            roles=roles,
            fixed=fixed,
            needs_master=needs_master,
            size=len(fixed) + len(pending),
        )
        slots = tuple(sorted(zip(kind_of, roles, strict=True), key=_slot_order))
        fixed_key = tuple(sorted((f.role.value, f.node.name) for f in fixed))
        skey = (shard.cluster, slots, needs_master, fixed_key, partial)
        shape = by_shape.get(skey)
        if shape is None:
            shape = by_shape[skey] = Shape(
                len(shapes), shard.cluster, slots, needs_master, tuple(fixed)
            )
            shapes.append(shape)
        shape.shards.append(shard)
    return Shapes(kinds=kinds, shapes=shapes, unplaceable=unplaceable, standing=standing)


def _walk(
    members: list[Member], nodes: dict[str, Node], standing: Standing
) -> tuple[list[tuple[Member, Node, Role]], list[Member], int]:
    """One shard: its members that stay (counted into ``standing``), those to place, and how
    many running members are masters (on a node or not)."""
    staying: list[tuple[Member, Node, Role]] = []
    pending: list[Member] = []
    running_masters = 0
    used, masters_on = standing.used, standing.masters_on
    for m in members:
        pod = m.pod
        if pod.node_name is None:
            if not pod.deleting:
                pending.append(m)
            continue
        role = m.role or Role.REPLICA
        running_masters += role is Role.MASTER
        node = nodes.get(pod.node_name)
        if node is None:
            continue
        staying.append((m, node, role))
        at = (m.cluster, node.zone or "")
        standing.zone_members[at] = standing.zone_members.get(at, 0) + 1
        total = used.get(node.name)
        if total is None:
            total = used[node.name] = [0, 0, 0]
        r = pod.requests
        total[0] += r.cpu
        total[1] += r.memory
        total[2] += r.pods
        if role is Role.MASTER:
            masters_on[node.name] = masters_on.get(node.name, 0) + 1
            standing.masters.append((m.cluster, node))
    _count_pairs(staying, standing.pairs)
    return staying, pending, running_masters


def _count_pairs(staying: list[tuple[Member, Node, Role]], pairs: dict[str, int]) -> None:
    """Replicas that stay in the rack / zone of their shard's one staying master."""
    masters = [node for _, node, role in staying if role is Role.MASTER]
    if len(masters) != 1 or len(staying) < 2:
        return
    (master,) = masters
    for _, node, role in staying:
        if role is not Role.MASTER:
            if node.rack == master.rack:
                pairs["rack"] += 1
            if node.zone == master.zone:
                pairs["zone"] += 1


def _slot_order(slot: tuple[int, Role | None]) -> tuple[int, int]:
    kind, role = slot
    return (kind, 0 if role is Role.MASTER else 1 if role is None else 2)


def slot_groups(shape: Shape) -> Counter[tuple[int, Role | None]]:
    return Counter(shape.slots)
