"""Level one: which zone holds each pending shard's master and replicas.

Zone capacity, master room, survive at the zone level, zone separation and the survival cost are
all counts at this level, so its optimum is a true lower bound for them; the utilisation ceiling
``t`` chosen here is the load-balance target the racks and nodes below work to.
"""

from collections import Counter

from models.policy import Policy
from solver.levels.model import SolveSettings, solve_level
from solver.levels.rooms import Rooms
from solver.levels.shapes import Shapes
from solver.levels.spec import Bundle, Child, LevelSolution, LevelSpec, Stay, SubRoom


def zone_children(rooms: Rooms) -> list[Child]:
    """Zones with a node that accepts new members, each with its racks that do."""
    children = []
    for zone in sorted(rooms.by_zone):
        nodes = tuple(rooms.by_zone[zone])
        racks = {rooms.nodes[i].rack for i in nodes}
        children.append(Child(zone, nodes, len(racks)))
    return children


def zone_spec(
    shapes: Shapes,
    rooms: Rooms,
    policy: Policy,
    strengths: dict[str, str],
    relaxed: frozenset[str],
) -> LevelSpec:
    children = zone_children(rooms)
    index = {c.name: i for i, c in enumerate(children)}
    bundles: list[Bundle] = []
    for shape in shapes.shapes:
        for shard in shape.shards:
            stays = tuple(
                Stay(
                    child=index.get(f.node.zone or ""),
                    role=f.role,
                    host=f.node.host,
                    sub_domain=f.node.rack,
                )
                for f in shard.fixed
            )
            bundles.append(
                Bundle(
                    shard=shard,
                    members=shard.pending,
                    kinds=shard.kinds,
                    roles=shard.roles,
                    needs_master=shard.needs_master,
                    stays=stays,
                    whole=True,
                )
            )
    fixed: dict[str, Counter[int | None]] = {}
    outside: dict[str, Counter[str]] = {}
    per_rack: dict[str, Counter[str]] = {}
    for cluster, node in shapes.standing.masters:
        zone = node.zone or ""
        child = index.get(zone)
        fixed.setdefault(cluster, Counter())[child] += 1
        if child is None:  # a zone without room for new members still holds masters that count
            outside.setdefault(cluster, Counter())[zone] += 1
        per_rack.setdefault(cluster, Counter())[f"{zone}/{node.rack}"] += 1
    members: dict[str, Counter[int | None]] = {}
    members_outside: dict[str, Counter[str]] = {}
    for (cluster, zone), n in shapes.standing.zone_members.items():
        child = index.get(zone)
        members.setdefault(cluster, Counter())[child] += n
        if child is None:
            members_outside.setdefault(cluster, Counter())[zone] += n
    holding = [{rooms.nodes[i].rack for i in c.nodes} for c in children]
    for _, node in shapes.standing.masters:
        if node.zone in index:
            holding[index[node.zone]].add(node.rack)
    return LevelSpec(
        level="zone",
        children=children,
        bundles=bundles,
        fixed_masters=fixed,
        fixed_outside_max={k: max(v.values()) for k, v in outside.items()},
        fixed_sub_masters={k: max(v.values()) for k, v in per_rack.items()},
        masters_total=None,
        t_low=rooms.floor,
        partial=policy.permit.allow_partial_shards,
        sub_level="rack",
        strengths=strengths,
        relaxed=relaxed,
        master_sub_domains=tuple(len(racks) for racks in holding),
        sub_rooms=_rack_rooms(children, rooms, shapes, policy),
        zone_members=members,
        zone_members_outside={k: max(v.values()) for k, v in members_outside.items()},
    )


SUB_ROOM_VARIABLES = 20_000
"""Most (Redis cluster, rack) shares the zone model's rack bound adds; beyond, the even share
alone bounds the fullest rack."""


def _rack_rooms(
    children: list[Child], rooms: Rooms, shapes: Shapes, policy: Policy
) -> tuple[tuple[SubRoom, ...], ...]:
    """Per zone, its racks' master room and the masters staying in each: a rack takes at most
    its nodes' master room, so where racks differ in size the fullest holds more than the even
    share (on uneven racks the even share alone left the plan's bound 0.14% short)."""
    if not policy.weights.rack_survival:
        return ()
    clusters = {shape.cluster for shape in shapes.shapes}
    clusters |= {cluster for cluster, _ in shapes.standing.masters}
    racks = sum(c.sub_domains for c in children)
    if not clusters or len(clusters) * racks > SUB_ROOM_VARIABLES:
        return ()
    out = []
    for child in children:
        room: dict[str, int] = {}
        for i in child.nodes:
            node = rooms.nodes[i]
            room[node.rack] = room.get(node.rack, 0) + max(0, rooms.cap - node.masters)
        fixed: dict[str, Counter[str]] = {}
        for cluster, node in shapes.standing.masters:
            if (node.zone or "") == child.name:
                fixed.setdefault(node.rack, Counter())[cluster] += 1
                room.setdefault(node.rack, 0)
        out.append(
            tuple(
                SubRoom(rack, room[rack], dict(fixed.get(rack, Counter()))) for rack in sorted(room)
            )
        )
    return tuple(out)


def solve_zones(
    shapes: Shapes,
    rooms: Rooms,
    policy: Policy,
    settings: SolveSettings,
    strengths: dict[str, str],
    relaxed: frozenset[str] = frozenset(),
) -> tuple[LevelSpec, LevelSolution]:
    spec = zone_spec(shapes, rooms, policy, strengths, relaxed)
    return spec, solve_level(spec, rooms, policy, settings)
