"""The three levels in order: zones, then racks inside each zone, then nodes inside each rack.

Level one sees the whole batch and every rule that counts per zone; its optimum is the plan's
lower bound. Each level below refines one domain at a time with the decisions above fixed, so
the work grows with the topology. A shard a lower level cannot finish is left for the repair
above (solver/solve.py), never half-placed.
"""

import time
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field

from models.cluster import Role
from models.policy import Policy
from models.snapshot import Snapshot
from solver.levels.model import SolveSettings
from solver.levels.nodes import Arrival, NodeUse, pack
from solver.levels.racks import rack_children, solve_racks
from solver.levels.rooms import MEMORY, EligibilityCache, Rooms, build_rooms
from solver.levels.shapes import PendingShard, Shapes, Standing, build_shapes
from solver.levels.spec import LevelSolution
from solver.levels.zones import solve_zones, zone_children
from solver.placement import Placement
from solver.volumes import VolumeSlots

Progress = Callable[[str, float, float], None]


@dataclass
class LevelsOptions:
    deadline: float
    """time.monotonic() by which the levels must be done."""
    workers: int
    seed: int
    progress: Progress | None = None
    relaxed: frozenset[str] = frozenset()
    """Required separation levels turned into heavy penalties (relaxWhenInfeasible)."""
    standing: Standing | None = None
    """What stays where it runs, when a caller keeps it (solver/levels/standing.py)."""
    eligibility: EligibilityCache | None = None
    """Which kinds each node accepts, when a caller keeps it (solver/levels/rooms.py)."""
    relative_gap: float = 0.0
    """The plan's relative gap (solver.relativeGap): level one stops within it, the racks
    below within what level one left of it."""
    packing: float = 0.0
    """Seconds the last level (packing members onto nodes) is expected to take: the models
    above share what the deadline leaves after it."""
    proof_first: float | None = None
    """Level one's search for a proof before its gap may stop it (``SolveSettings``)."""
    pack_until: float | None = None
    """When packing stops placing (None: ``deadline``). A caller with no plan to fall back on
    lets packing finish: what it leaves, greedy would place around it, more slowly."""


@dataclass
class LevelsResult:
    placement: Placement
    """Members the levels placed (role and node); failed and unplaceable shards are absent."""
    failed: set[str]
    """Shards a level could not finish: the repair above may still place them."""
    unplaceable: dict[str, str]
    """Shards no placement can make right, with why."""
    unplaced_bound: int
    """No placement leaves fewer pending pods unplaced (valid lower bound)."""
    soft_bound: int
    """The soft objective of any placement that leaves exactly ``unplaced_bound`` pods
    unplaced is at least this (valid lower bound)."""
    shortfall: int
    """Domains already short of a master majority stay at least this short in all (the soft
    bound assumes this minimum)."""
    proven: bool
    """Level one proved its optimum (its bound is tight)."""
    zone_status: str
    seconds: dict[str, float] = field(default_factory=dict)


ZONES_SHARE = 0.6
"""Level one's share of the models' budget."""
ZONES_SHARE_SURVIVE_RACK = 0.3
"""Under ``survive: rack`` a zone whose rack model has no answer cannot be packed whole (the
packing does not keep the rule): its shards go to greedy. The racks get more of the budget.
15,000 nodes, 150 Redis clusters: level one's plan the same as with 0.6 (found in 3.4 s), the
command 16.8-19.3 s instead of 21.9 s; the largest zone's rack model answered in one logged
run of three (123 pods left out instead of greedy's 300); at 0.4 in none of two."""


def strengths_of(policy: Policy) -> dict[str, str]:
    return {level: policy.rules.replica_separation.strength(level) for level in ("rack", "zone")}


def place_by_levels(
    snapshot: Snapshot, policy: Policy, seed: Placement | None, options: LevelsOptions
) -> LevelsResult:
    started = time.monotonic()
    seconds: dict[str, float] = {}
    shapes = build_shapes(snapshot, policy.permit.allow_partial_shards, options.standing)
    standing = shapes.standing
    rooms = build_rooms(
        snapshot, policy, standing.used, standing.masters_on, shapes.kinds, options.eligibility
    )
    strengths = strengths_of(policy)
    seconds["prepare"] = time.monotonic() - started

    models_until = options.deadline - options.packing

    def budget(share: float) -> float:
        return max(0.05, (models_until - time.monotonic()) * share)

    # Level one: zones.
    rack_survival = policy.rules.survive == "rack"
    children = zone_children(rooms)
    zone_index = {c.name: i for i, c in enumerate(children)}
    hint, hint_t = _zone_hint(seed, snapshot, rooms, zone_index)
    fixed_costs = _fixed_constants(shapes, policy)
    tick = time.monotonic()
    _, zsol = solve_zones(
        shapes,
        rooms,
        policy,
        SolveSettings(
            time_limit=budget(ZONES_SHARE_SURVIVE_RACK if rack_survival else ZONES_SHARE),
            workers=options.workers,
            seed=options.seed,
            progress=options.progress,
            phase="level one: zones",
            hint=hint,
            hint_t=hint_t,
            offset=fixed_costs,
            relative_gap=options.relative_gap,
            proof_first=options.proof_first,
        ),
        strengths,
        options.relaxed,
    )
    seconds["zones"] = time.monotonic() - tick
    unplaced_bound, shortfall, soft_bound = (
        zsol.lower_bounds() if zsol.status in ("OPTIMAL", "FEASIBLE") else (0, 0, 0)
    )
    soft_bound += fixed_costs

    failed: set[str] = set(zsol.unplaced_shards)
    by_zone: dict[str, tuple[str, Role]] = {
        key: (children[child].name, role) for key, (child, role) in zsol.assignment.items()
    }
    pending = [s for shape in shapes.shapes for s in shape.shards]
    masters_total = _masters_total(shapes, by_zone)

    # Level two: racks, one zone at a time.
    tick = time.monotonic()
    by_rack: dict[str, tuple[tuple[str, str | None], Role]] = {}
    """Pod key -> ((zone, rack or None for the whole zone), role): where level three packs it."""
    zones = sorted({zone for zone, _ in by_zone.values()})
    rack_rules = policy.rules.survive == "rack"
    separate = strengths["rack"] != "ignore"
    packable = strengths["rack"] != "required" or "rack" in options.relaxed
    rack_gap = _rack_gap(zsol, options.relative_gap, fixed_costs) / max(1, len(zones))
    for i, zone in enumerate(zones):
        shards = [s for s in pending if s.key not in failed and _touches(s, by_zone, zone)]
        if (
            not rack_rules
            and not any(_rack_coupled(s, by_zone, zone, separate) for s in shards)
            and _packing_spreads_masters(zone, shards, by_zone, rooms, standing)
        ):
            # No shard has a master and a replica here with one of them to place, and every
            # rack has room for its even share of masters: no rack rule is in play, and packing
            # the zone's nodes directly (each master to the rack with the fewest of its Redis
            # cluster, each member to the least used node) balances them best.
            _whole_zone(zone, shards, by_zone, by_rack)
            continue
        rspec, rsol = solve_racks(
            zone,
            by_zone,
            shards,
            shapes,
            rooms,
            policy,
            SolveSettings(
                time_limit=budget(0.5 / (len(zones) - i)),
                workers=options.workers,
                seed=options.seed,
                progress=options.progress,
                phase=f"level two: racks of {zone}",
                absolute_gap=rack_gap,
            ),
            zsol.t,
            strengths,
            options.relaxed,
            masters_total,
        )
        unfinished = rsol.status not in ("OPTIMAL", "FEASIBLE") or (
            rsol.status == "FEASIBLE"
            and (bool(rsol.unplaced_shards) or _rough(rsol.objective, rsol.bound, rack_gap))
        )
        if unfinished and not rack_rules and packable:
            # No rack plan within its share of the budget (a large zone, a short limit), or one
            # that leaves out shards it has not proven it must, or a first rough one: the zone
            # is packed whole as above rather than those shards failing (greedy, placing them
            # around the others, finds the nodes without a master already filled), and the
            # packing's misses of preferred rack separation cost their weight.
            _whole_zone(zone, shards, by_zone, by_rack)
            continue
        failed |= rsol.unplaced_shards
        for key, (child, role) in rsol.assignment.items():
            by_rack[key] = ((zone, rspec.children[child].name), role)
    seconds["racks"] = time.monotonic() - tick

    # Level three: nodes, one rack at a time.
    tick = time.monotonic()
    use = NodeUse(rooms, volumes=VolumeSlots(snapshot))
    for shard in pending:
        for f in shard.fixed:
            use.shard_hosts[shard.key].add(f.node.host)
    for cluster, node in standing.masters:
        use.host_masters[(cluster, node.host)] += 1
        use.rack_masters[(cluster, node.zone or "", node.rack)] += 1
    if policy.rules.survive == "host":
        use.host_master_cap = {k: max(0, (n - 1) // 2) for k, n in masters_total.items()}
    arrivals: dict[tuple[str, str | None], list[Arrival]] = defaultdict(list)
    shard_of: dict[str, PendingShard] = {}
    for shard in pending:
        if shard.key in failed:
            continue
        for member, kind in zip(shard.pending, shard.kinds, strict=True):
            decided = by_rack.get(member.key)
            if decided is None:
                continue
            arrivals[decided[0]].append(Arrival(member, kind, decided[1]))
            shard_of[member.key] = shard
    placement = Placement()
    for scope in sorted(arrivals, key=lambda z: (z[0], z[1] or "")):
        zone, rack = scope
        nodes = [
            i for i in rooms.by_zone.get(zone, []) if rack is None or rooms.nodes[i].rack == rack
        ]
        until = options.deadline if options.pack_until is None else options.pack_until
        placed, missing = pack(use, nodes, arrivals[scope], until)
        for a in missing:
            failed.add(a.member.shard_key)
        for key, index in placed.items():
            placement.node[key] = rooms.nodes[index].node.name
    roles = {a.member.key: a.role for items in arrivals.values() for a in items}
    for key in placement.node:
        placement.role[key] = roles[key]
    # A shard is placed whole or not at all (unless partial shards are allowed).
    partial = policy.permit.allow_partial_shards
    for shard in pending:
        members = [m.key for m in shard.pending]
        if shard.key in failed or (not partial and not all(k in placement.node for k in members)):
            if shard.key not in failed and any(k in placement.node for k in members):
                failed.add(shard.key)
            for key in members:
                placement.node.pop(key, None)
                placement.role.pop(key, None)
    seconds["nodes"] = time.monotonic() - tick
    return LevelsResult(
        placement=placement,
        failed=failed,
        unplaceable=shapes.unplaceable,
        unplaced_bound=unplaced_bound,
        soft_bound=soft_bound,
        shortfall=shortfall,
        proven=zsol.proven,
        zone_status=zsol.status,
        seconds=seconds,
    )


def _whole_zone(
    zone: str,
    shards: list[PendingShard],
    by_zone: dict[str, tuple[str, Role]],
    by_rack: dict[str, tuple[tuple[str, str | None], Role]],
) -> None:
    """The members level one sent to ``zone``, to be packed over all its nodes (no rack)."""
    for s in shards:
        for m in s.pending:
            where = by_zone.get(m.key)
            if where is not None and where[0] == zone:
                by_rack[m.key] = ((zone, None), where[1])


def _rack_gap(zsol: LevelSolution, relative_gap: float, offset: int) -> float:
    """What level one left of the plan's gap, in the plan's units, for the racks to stop in."""
    if not relative_gap or zsol.status not in ("OPTIMAL", "FEASIBLE"):
        return 0.0
    soft = zsol.soft_cost()
    bound_soft = zsol.lower_bounds()[2]
    return max(0.0, relative_gap * (soft + offset) - (soft - bound_soft))


def _touches(shard: PendingShard, by_zone: dict[str, tuple[str, Role]], zone: str) -> bool:
    return any(by_zone.get(m.key, ("",))[0] == zone for m in shard.pending)


def _rack_coupled(
    shard: PendingShard, by_zone: dict[str, tuple[str, Role]], zone: str, separate: bool
) -> bool:
    """Whether rack separation has a say over the shard in the zone: its master and a replica
    both there (placed there by level one, or staying there), one of them still to place.

    Replicas of one master may share a rack, and a master's rack share is the packing's to
    spread, so without such a pair the rack model would decide nothing the packing does not.
    """
    if not separate:
        return False
    placed = {by_zone[m.key][1] for m in shard.pending if by_zone.get(m.key, ("",))[0] == zone}
    staying = {f.role for f in shard.fixed if f.node.zone == zone}
    here = placed | staying
    return Role.MASTER in here and Role.REPLICA in here and bool(placed)


def _packing_spreads_masters(
    zone: str,
    shards: list[PendingShard],
    by_zone: dict[str, tuple[str, Role]],
    rooms: Rooms,
    standing: Standing,
) -> bool:
    """Whether packing the zone whole spreads each Redis cluster's masters over its racks as
    evenly as the rack model would.

    Packing sends each master to the rack with the fewest of its cluster's masters; that fills
    every cluster's racks up to the same level (the least possible fullest rack) unless a rack
    runs out of master room first. So: every rack has room for what that filling could send it
    (up to the even share of its cluster's masters in the zone, less those it already holds).
    """
    new: Counter[str] = Counter()
    kinds: set[int] = set()
    for shard in shards:
        for member, kind in zip(shard.pending, shard.kinds, strict=True):
            where = by_zone.get(member.key)
            if where is not None and where[0] == zone and where[1] is Role.MASTER:
                new[shard.cluster] += 1
                kinds.add(kind)
    if not new:
        return True
    racks = {child.name: list(child.nodes) for child in rack_children(rooms, zone)}
    held: Counter[tuple[str, str]] = Counter()
    for cluster, node in standing.masters:
        if node.zone == zone and node.rack in racks:
            held[(cluster, node.rack)] += 1
    totals = Counter(cluster for cluster, _ in held)
    for rack, nodes in racks.items():
        room = min(rooms.table(nodes, kind, master=True)[-1] for kind in kinds)
        share = sum(
            min(n, max(0, -(-(totals[c] + n) // len(racks)) - held[(c, rack)]))
            for c, n in new.items()
        )
        if room < share:
            return False
    return True


def _masters_total(shapes: Shapes, by_zone: dict[str, tuple[str, Role]]) -> dict[str, int]:
    """Per Redis cluster: masters after level one (those that stay and those it placed)."""
    totals: Counter[str] = Counter(cluster for cluster, _ in shapes.standing.masters)
    for shape in shapes.shapes:
        for shard in shape.shards:
            for m in shard.pending:
                where = by_zone.get(m.key)
                if where is not None and where[1] is Role.MASTER:
                    totals[shard.cluster] += 1
    return dict(totals)


def _rough(objective: int, bound: int, allowed: float) -> bool:
    """A rack plan the search stopped on while still over twice its bound (and past the gap it
    may keep): a first solution, not a spread. Packing the zone whole does better there (60
    Redis clusters on 15,000 nodes, racks of 10-300 nodes: one zone's rack plan cost 87,396
    against its bound of 116)."""
    return objective - bound > max(allowed, bound)


def _zone_hint(
    seed: Placement | None, snapshot: Snapshot, rooms: Rooms, zone_index: dict[str, int]
) -> tuple[dict[str, tuple[int, Role]] | None, int | None]:
    """The seed placement as level one's start: each member's zone, and the seed's ceiling."""
    if seed is None:
        return None, None
    nodes = snapshot.node_by_name
    by_name = {r.node.name: r for r in rooms.nodes}
    hint: dict[str, tuple[int, Role]] = {}
    extra: Counter[str] = Counter()
    members = {m.key: m for m in snapshot.pending}
    for key, name in seed.node.items():
        member = members.get(key)
        node = nodes.get(name)
        if member is None or node is None or node.zone not in zone_index:
            continue
        hint[key] = (zone_index[node.zone], seed.role.get(key, Role.REPLICA))
        extra[name] += member.pod.requests.memory
    ceiling = rooms.floor
    for name, memory in extra.items():
        room = by_name.get(name)
        if room is not None:
            ceiling = max(ceiling, room.utilisation(memory))
    return hint, min(ceiling, rooms.ceiling)


def _fixed_constants(shapes: Shapes, policy: Policy) -> int:
    """Soft costs of the members that stay that no level sees: pairs of them sharing a domain
    (preferred separation) and masters stacked beyond the first on a node."""
    weights = policy.weights
    standing = shapes.standing
    total = 0
    for level in ("rack", "zone"):
        if policy.rules.replica_separation.strength(level) == "preferred":
            total += weights.separation(level) * standing.pairs[level]
    total += weights.master_balance * sum(max(0, n - 1) for n in standing.masters_on.values())
    return total


__all__ = ["MEMORY", "LevelSolution", "LevelsOptions", "LevelsResult", "place_by_levels"]
