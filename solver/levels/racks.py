"""Level two: inside each zone, which rack takes each member the zone level sent there.

Rack separation only concerns the members that share their master's zone, and survive at the
rack level only the shards that lie inside one zone; everything else is capacity. Zones are
independent once level one has decided, so each is a small model of its own.
"""

from collections import Counter, defaultdict

from models.cluster import Member, Role
from models.policy import Policy
from solver.levels.model import SolveSettings, solve_level
from solver.levels.rooms import Rooms
from solver.levels.shapes import Fixed, PendingShard, Shapes
from solver.levels.spec import Bundle, Child, LevelSolution, LevelSpec, Stay


def rack_children(rooms: Rooms, zone: str) -> list[Child]:
    racks: dict[str, list[int]] = defaultdict(list)
    for i in rooms.by_zone.get(zone, []):
        racks[rooms.nodes[i].rack].append(i)
    return [
        Child(rack, tuple(nodes), len({rooms.nodes[i].host for i in nodes}))
        for rack, nodes in sorted(racks.items())
    ]


def rack_spec(
    zone: str,
    placed: dict[str, tuple[str, Role]],
    shards: list[PendingShard],
    shapes: Shapes,
    rooms: Rooms,
    policy: Policy,
    t_low: int,
    strengths: dict[str, str],
    relaxed: frozenset[str],
    masters_total: dict[str, int],
) -> LevelSpec:
    """The rack model of one zone: ``placed`` maps pod keys to (zone, role) from level one."""
    children = rack_children(rooms, zone)
    index = {c.name: i for i, c in enumerate(children)}
    bundles: list[Bundle] = []
    for shard in shards:
        here: list[tuple[Member, int, Role]] = []
        elsewhere = False
        for member, kind in zip(shard.pending, shard.kinds, strict=True):
            where = placed.get(member.key)
            if where is None:
                continue
            if where[0] == zone:
                here.append((member, kind, where[1]))
            else:
                elsewhere = True
        if not here:
            continue
        stays = tuple(_stay(f, zone, index) for f in shard.fixed)
        whole = not elsewhere and all(f.node.zone == zone for f in shard.fixed)
        bundles.append(
            Bundle(
                shard=shard,
                members=[m for m, _, _ in here],
                kinds=[k for _, k, _ in here],
                roles=[r for _, _, r in here],
                needs_master=False,
                stays=stays,
                whole=whole,
            )
        )
    fixed: dict[str, Counter[int | None]] = {}
    outside: dict[str, Counter[str]] = {}
    for cluster, node in shapes.standing.masters:
        child = index.get(node.rack) if node.zone == zone else None
        fixed.setdefault(cluster, Counter())[child] += 1
        if child is None:
            outside.setdefault(cluster, Counter())[f"{node.zone}/{node.rack}"] += 1
    return LevelSpec(
        level="rack",
        children=children,
        bundles=bundles,
        fixed_masters=fixed,
        fixed_outside_max={k: max(v.values()) for k, v in outside.items()},
        fixed_sub_masters={},
        masters_total=masters_total,
        t_low=t_low,
        partial=False,
        sub_level=None,
        strengths=strengths,
        relaxed=relaxed,
    )


def _stay(f: Fixed, zone: str, index: dict[str, int]) -> Stay:
    child = index.get(f.node.rack) if f.node.zone == zone else None
    return Stay(child=child, role=f.role, host=f.node.host, sub_domain=f.node.host)


def solve_racks(
    zone: str,
    placed: dict[str, tuple[str, Role]],
    shards: list[PendingShard],
    shapes: Shapes,
    rooms: Rooms,
    policy: Policy,
    settings: SolveSettings,
    t_low: int,
    strengths: dict[str, str],
    relaxed: frozenset[str],
    masters_total: dict[str, int],
) -> tuple[LevelSpec, LevelSolution]:
    spec = rack_spec(
        zone, placed, shards, shapes, rooms, policy, t_low, strengths, relaxed, masters_total
    )
    return spec, solve_level(spec, rooms, policy, settings)
