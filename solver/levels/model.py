"""One level of the topology tree as a CP-SAT model: how many bundles of each type go to each
pattern of child domains.

The zone level places whole pending shards into zones; the rack level, inside one zone, places
the members the zone level sent there into its racks. Both are this model with other children:

* a *bundle* is the pending members of one shard that this level places, with the shard's
  members that stay (and where they are, if inside the parent domain);
* a *pattern* says how many of a bundle's members of each kind and role go to each child;
* ``x[type, pattern]`` counts the bundles of a type that take the pattern. Bundles of one type
  are interchangeable, so the model grows with the patterns, not with the batch.

The rules enter as pattern filters (distinct hosts, required separation, a shard kept alive when
one domain fails), pattern costs (preferred separation, and a lower bound of the next level's
separation cost), per-child capacity read from ``solver/levels/rooms.py`` tables at the
utilisation ceiling ``t`` the model chooses, and per-cluster master counts (survive majority,
survival cost). Every constraint holds for every real placement, so the optimum of this model is
a valid lower bound of the objective for the terms it sees.
"""

import math
import time
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field

from models.cluster import Role
from models.policy import Policy
from solver.cpsat import cp_model
from solver.levels.patterns import OutOfTime, bundle_types, check_time
from solver.levels.rooms import CPU, MEMORY, PODS, Rooms
from solver.levels.spec import (
    UNPLACED,
    Bundle,
    BundleType,
    LevelSolution,
    LevelSpec,
    Pattern,
    SubRoom,
    lexical_parts,
)
from solver.levels.start import balanced_start

Progress = Callable[[str, float, float], None]
"""Called with (phase, objective, bound) as better solutions are found."""


@dataclass
class SolveSettings:
    time_limit: float
    workers: int
    seed: int
    progress: Progress | None = None
    phase: str = ""
    hint: dict[str, tuple[int, Role]] | None = None
    """Pod key -> (child index, role) of a known placement (greedy's): the search's start."""
    hint_t: int | None = None
    offset: int = 0
    """Soft costs of what stays that the model does not count, added to what progress shows."""
    relative_gap: float = 0.0
    """Stop once the soft cost (with ``offset``) is within this share of itself above its
    bound, with the unplaced pods and the majority shortfall already proven."""
    absolute_gap: float = 0.0
    """Or once it is within this much of its bound: a level below the first gets its share of
    the plan's gap in the plan's own units, since its own cost is a small part of the plan's."""
    proof_first: float | None = None
    """Deterministic seconds searched for a proof before a gap may stop the search
    (``PROOF_FIRST`` when None)."""

    def stops_early(self) -> bool:
        return bool(self.relative_gap or self.absolute_gap)


@dataclass
class _Model:
    model: cp_model.CpModel = field(default_factory=cp_model.CpModel)
    x: dict[tuple[int, int], cp_model.IntVar] = field(default_factory=dict)
    t: cp_model.IntVar | None = None
    levels: list[tuple[int, cp_model.IntVar]] = field(default_factory=list)
    terms: list[tuple[int, object]] = field(default_factory=list)
    unplaced_terms: list[object] = field(default_factory=list)
    shortfalls: list[tuple[object, int]] = field(default_factory=list)
    """(variable, upper bound): how far a domain already short of a master majority stays short."""
    big: int = 1
    """The weight of one unplaced pod: more than every shortfall and soft cost together."""
    big_short: int = 1
    """The weight of one step of a majority shortfall: more than every soft cost together."""


def distinct_ceilings(tables: list[list[int]]) -> list[int]:
    """Indices of the ceilings worth a choice: the lowest, and each one where some table (room
    per ceiling) differs from the ceiling below it.

    A ceiling whose rooms all equal those of the ceiling below admits the same placements at a
    higher load cost, so no optimum takes it: dropping it is exact, and on uniform nodes it
    leaves one indicator per step of a pod's size instead of one per percent.
    """
    if not tables:
        return [0]
    rows = list(zip(*tables, strict=True))
    return [0, *(i for i in range(1, len(rows)) if rows[i] != rows[i - 1])]


def solve_level(
    spec: LevelSpec, rooms: Rooms, policy: Policy, settings: SolveSettings
) -> LevelSolution:
    """Build and solve one level; every bundle ends in a child, or unplaced with its shard.
    The budget covers the building too: a model too large to build in it is not solved
    (UNKNOWN, as when the search finds nothing), so a late level never runs past the limit."""
    until = time.monotonic() + max(0.05, settings.time_limit)
    try:
        return _build_and_solve(spec, rooms, policy, settings, until)
    except OutOfTime:
        return _unsolved("UNKNOWN", spec, rooms.ceiling)


def _build_and_solve(
    spec: LevelSpec, rooms: Rooms, policy: Policy, settings: SolveSettings, until: float
) -> LevelSolution:
    types = bundle_types(spec, rooms, policy, until)
    weights = policy.weights
    m = _Model()
    model = m.model
    children = spec.children
    load_weight = weights.load_balance
    t_high = rooms.ceiling
    t_low = min(max(spec.t_low, rooms.floor), t_high)
    ceilings = list(range(t_low, t_high + 1)) if load_weight else [t_high]
    base = rooms.floor

    # x[type, pattern]: bundles of the type taking the pattern; the rest of the type is unplaced.
    unplaced_pods = []
    for bt in types:
        n = len(bt.bundles)
        vars_ = []
        for pi, pattern in enumerate(bt.patterns):
            v = model.new_int_var(0, n, f"x[{bt.index},{pi}]")
            m.x[(bt.index, pi)] = v
            vars_.append(v)
            if pattern.cost:
                m.terms.append((pattern.cost, v))
            if pattern.unplaced:
                unplaced_pods.append(pattern.unplaced * v)
        placed = sum(vars_, 0)
        model.add(placed <= n)
        check_time(until)
        pods = len(bt.bundles[0].members)
        unplaced_pods.append(pods * (n - placed))

    # Capacity per child, at the chosen ceiling. Room beyond what the whole batch could use is
    # cut to that, so any valid quantity (an exabyte node) keeps the coefficients small.
    members_of_kind: Counter[int] = Counter()
    for bt in types:
        for kind in bt.bundles[0].kinds:
            members_of_kind[kind] += len(bt.bundles)
    most = {
        r: 1
        + sum(n * rooms.kinds[k].requests[r] // rooms.units[r] for k, n in members_of_kind.items())
        for r in (CPU, MEMORY, PODS)
    }
    capacity: list[tuple[list[object], list[int]]] = []
    """(demand, room per ceiling): the constraints that read the ceiling, added once the
    ceilings that change no room are dropped."""
    # Each child's demand, per kind, in one pass over the patterns (a pass per child grew with
    # children times patterns: seconds for a rack model of 150 Redis clusters).
    demands: list[dict[int, list[object]]] = [defaultdict(list) for _ in children]
    master_demands: list[dict[int, list[object]]] = [defaultdict(list) for _ in children]
    for bt in types:
        check_time(until)
        for pi, pattern in enumerate(bt.patterns):
            x = m.x[(bt.index, pi)]
            for c, kind, role, n in pattern.counts:
                if c == UNPLACED:
                    continue
                term = n * x
                demands[c][kind].append(term)
                if role is Role.MASTER:
                    master_demands[c][kind].append(term)
    for child, demand, master_demand in zip(children, demands, master_demands, strict=True):
        check_time(until)
        nodes = list(child.nodes)
        for kind, parts in demand.items():
            table = _capped(
                _sliced(rooms.table(nodes, kind), base, ceilings), members_of_kind[kind]
            )
            capacity.append((parts, table))
        for kind, parts in master_demand.items():
            table = _sliced(rooms.table(nodes, kind, master=True), base, ceilings)
            capacity.append((parts, _capped(table, members_of_kind[kind])))
        all_masters = [p for parts in master_demand.values() for p in parts]
        if len(master_demand) > 1:
            room = min(
                sum(max(0, rooms.cap - rooms.nodes[i].masters) for i in nodes),
                sum(members_of_kind.values()),
            )
            model.add(sum(all_masters, 0) <= room)
        if len(demand) > 1:
            units = rooms.units
            memory = _capped(_sliced(rooms.memory_table(nodes), base, ceilings), most[MEMORY])
            need = [
                (rooms.kinds[k].requests[MEMORY] // units[MEMORY]) * p
                for k, parts in demand.items()
                for p in parts
            ]
            capacity.append((need, memory))
            for resource in (CPU, PODS):
                need = [
                    (rooms.kinds[k].requests[resource] // units[resource]) * p
                    for k, parts in demand.items()
                    for p in parts
                ]
                model.add(sum(need, 0) <= min(rooms.total(nodes, resource), most[resource]))

    # The ceiling t, by one indicator per ceiling that gives some child more room than the
    # ceiling below it: a ceiling that adds no room is never better than the one below.
    kept = distinct_ceilings([table for _, table in capacity])
    for i in kept:
        m.levels.append((ceilings[i], model.new_bool_var(f"t[{ceilings[i]}]")))
    model.add_exactly_one(b for _, b in m.levels)
    m.t = model.new_int_var(ceilings[0], ceilings[kept[-1]], "t")
    model.add(m.t == sum(t * b for t, b in m.levels))
    for parts, table in capacity:
        room = sum((table[i] * b for i, (_, b) in zip(kept, m.levels, strict=True) if table[i]), 0)
        model.add(sum(parts, 0) <= room)

    # Masters per Redis cluster and child: survive's majority and the survival cost.
    _cluster_rules(m, spec, types, policy)
    _member_spread(m, spec, types, policy)
    check_time(until)

    m.terms.append((load_weight, m.t))
    upper = _soft_upper_bound(spec, types, policy, t_high)
    # Lexicographic: unplaced pods, then shortfalls of a master majority (a hard rule the
    # running pods already break), then the soft terms.
    big_short = m.big_short = upper + 1
    big = m.big = big_short * (1 + sum(u for _, u in m.shortfalls))
    terms = [(weight, expr) for weight, expr in m.terms if weight]
    terms += [(big_short, short) for short, _ in m.shortfalls]
    soft = cp_model.LinearExpr.weighted_sum([e for _, e in terms], [w for w, _ in terms])
    model.minimize(big * sum(unplaced_pods, 0) + soft)

    if settings.hint is not None:
        _add_hint(m, types, settings, spec)
    elif spec.level == "zone" and len(spec.bundles) >= START_FROM_BUNDLES:
        _add_start(m, types, spec, rooms)

    check_time(until)
    left = until - time.monotonic()
    solver = cp_model.CpSolver()
    params = solver.parameters
    params.max_time_in_seconds = max(0.05, left)
    params.num_workers = max(1, settings.workers)
    params.random_seed = settings.seed
    # One worker and a deterministic budget: the same input gives the same plan.
    params.max_deterministic_time = max(0.05, settings.time_limit)
    # The models are small and their LP relaxation is strong; full linearization lets one
    # worker prove what otherwise takes a portfolio (docs/benchmarks.md).
    params.linearization_level = 2
    params.log_search_progress = False
    watch = _Watch(solver, settings, big, big_short)
    callback = watch if settings.progress or settings.stops_early() else None
    if not settings.stops_early():
        return _outcome(solver, solver.solve(model, callback), m, types, spec, t_high)
    solver.best_bound_callback = watch.on_bound
    # First a short search for the proof; only then may the gap stop the search.
    budget = params.max_deterministic_time
    proof_first = PROOF_FIRST if settings.proof_first is None else settings.proof_first
    params.max_deterministic_time = min(budget, proof_first)
    first = _outcome(solver, solver.solve(model, callback), m, types, spec, t_high)
    left = until - time.monotonic()
    if first.proven or first.status == "INFEASIBLE" or watch.within_gap() or left < 0.05:
        return first
    params.max_deterministic_time = max(0.05, budget - solver.deterministic_time)
    params.max_time_in_seconds = left
    watch.stopping = True
    again = _outcome(solver, solver.solve(model, callback), m, types, spec, t_high)
    return again if again.status in ("OPTIMAL", "FEASIBLE") else first


START_FROM_BUNDLES = 1_000
"""Level one starts from balanced_start's counts (no seed given) from this many shards: below
it CP-SAT's own first plans place everything within a fraction of a second (the binder's
batches, the bundled example), and the plan it settles on stays the one it always chose."""

PROOF_FIRST = 0.05
"""Deterministic seconds a level searches for its proof before a gap may stop it. An easy
optimum, often found and proven at once, is worth more than the first plan within the gap:
that plan's shape can cost the levels below (a replica left in its master's zone brings that
zone a rack model of thousands of patterns). A proof that takes longer (1.6-1.9 s for a zone
model on 1,000 nodes) is where the gap pays."""


def _outcome(
    solver: cp_model.CpSolver,
    code: int,
    m: _Model,
    types: list[BundleType],
    spec: LevelSpec,
    t_high: int,
) -> LevelSolution:
    """The level's answer as the solver left it: every bundle in a child, or unplaced."""
    big, big_short = m.big, m.big_short
    status = solver.status_name(code)
    if code not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        return _unsolved(status, spec, t_high, big, big_short)
    assignment, unplaced = _decode(solver, m, types)
    t_value = solver.value(m.t)
    objective = round(solver.objective_value)
    # The objective is integral, so the bound rounds up (a hair below, against float noise).
    bound = math.ceil(solver.best_objective_bound - 1e-6)
    return LevelSolution(
        status=status,
        assignment=assignment,
        unplaced_shards=unplaced,
        t=t_value,
        objective=objective,
        bound=min(bound, objective),
        big=big,
        big_short=big_short,
        proven=code == cp_model.OPTIMAL,
    )


def _unsolved(
    status: str, spec: LevelSpec, t_high: int, big: int = 1, big_short: int = 1
) -> LevelSolution:
    """No answer: every bundle's shard left out, at the highest ceiling."""
    unplaced_all = {b.shard.key for b in spec.bundles}
    return LevelSolution(status, {}, unplaced_all, t_high, 0, 0, big, big_short, False)


def _capped(table: list[int], most: int) -> list[int]:
    return [min(v, most) for v in table]


def _sliced(table: list[int], base: int, ceilings: list[int]) -> list[int]:
    """The table's entries for the model's ceilings (tables start at rooms.floor)."""
    start = ceilings[0] - base
    return table[start : start + len(ceilings)]


def _cluster_rules(m: _Model, spec: LevelSpec, types: list[BundleType], policy: Policy) -> None:
    model = m.model
    survive = policy.rules.survive
    clusters = sorted({bt.cluster for bt in types} | set(spec.fixed_masters))
    children = range(len(spec.children))
    for cluster in clusters:
        cluster_types = [bt for bt in types if bt.cluster == cluster]
        fixed = spec.fixed_masters.get(cluster, Counter())
        fixed_total = sum(fixed.values())
        new_in: dict[int, list[object]] = defaultdict(list)
        new_total: list[object] = []
        for bt in cluster_types:
            for pi, pattern in enumerate(bt.patterns):
                v = m.x[(bt.index, pi)]
                if pattern.master_child is not None:
                    new_in[pattern.master_child].append(v)
                    new_total.append(v)
        masters_in = {c: fixed[c] + sum(new_in[c], 0) for c in children}
        if spec.masters_total is not None:
            total: object = spec.masters_total.get(cluster, fixed_total)
        else:
            total = fixed_total + sum(new_total, 0)
        # survive: a strict majority of masters outside any one child.
        if survive == spec.level and (new_total or fixed_total):
            active = None
            if spec.masters_total is None and not fixed_total:
                active = model.new_bool_var(f"active[{cluster}]")
                model.add(sum(new_total, 0) >= 1).only_enforce_if(active)
                model.add(sum(new_total, 0) == 0).only_enforce_if(active.negated())
            domains: list[tuple[int | None, object, int]] = [
                (c, masters_in[c], fixed[c]) for c in children if new_in[c] or fixed[c]
            ]
            outside = spec.fixed_outside_max.get(cluster, 0)
            if outside:
                domains.append((None, outside, outside))
            bundles = sum(len(bt.bundles) for bt in cluster_types)
            for c, inside, fixed_here in domains:
                if fixed_total and 2 * fixed_here - fixed_total >= 0:
                    # What runs already breaks the rule here: never worse than now, and as
                    # little short of a majority as the placement can make it.
                    upper = 2 * (fixed_here + bundles) + 1
                    short = model.new_int_var(0, upper, f"short[{cluster},{c}]")
                    model.add(short >= 2 * inside - total + 1)
                    model.add(short <= 2 * fixed_here - fixed_total + 1)
                    m.shortfalls.append((short, upper))
                elif c is not None and new_in[c]:
                    ct = model.add(2 * inside - total <= -1)
                    if active is not None:
                        ct.only_enforce_if(active)
        # survive at any level: one domain holds a master at least, so a strict majority
        # outside it needs three masters or more.
        if survive != "none" and spec.masters_total is None and not fixed_total and new_total:
            active = model.new_bool_var(f"any_master[{cluster}]")
            model.add(sum(new_total, 0) >= 1).only_enforce_if(active)
            model.add(sum(new_total, 0) == 0).only_enforce_if(active.negated())
            model.add(sum(new_total, 0) >= 3).only_enforce_if(active)
        # survival: the masters the worst single failure takes, per cluster and level (zones at
        # weights.survival, racks at weights.rackSurvival). Exact at the model's own level; one
        # level up, a child's masters spread over its sub-domains at best.
        if not (new_total or fixed_total):
            continue
        upper = fixed_total + sum(len(bt.bundles) for bt in cluster_types)
        for level, weight in (
            ("zone", policy.weights.survival),
            ("rack", policy.weights.rack_survival),
        ):
            if not weight or level not in (spec.level, spec.sub_level):
                continue
            most = model.new_int_var(0, upper, f"worst[{cluster},{level}]")
            if level == spec.level:
                model.add(most >= spec.fixed_outside_max.get(cluster, 0))
                for c in children:
                    model.add(most >= masters_in[c])
            else:
                model.add(most >= spec.fixed_sub_masters.get(cluster, 0))
                for c in children:
                    model.add(max(1, spec.master_sub_domains[c]) * most >= masters_in[c])
                    if spec.sub_rooms:
                        _sub_room_cuts(
                            model, spec.sub_rooms[c], cluster, most, masters_in[c], upper
                        )
            m.terms.append((weight, most))


def _member_spread(m: _Model, spec: LevelSpec, types: list[BundleType], policy: Policy) -> None:
    """memberSpread at level one, exact: per Redis cluster, the most members in one zone
    (staying ones and the bundles' by pattern); the fullest holds at least the average."""
    weight = policy.weights.member_spread
    if spec.level != "zone" or not weight:
        return
    model = m.model
    children = range(len(spec.children))
    for cluster in sorted({bt.cluster for bt in types} | set(spec.zone_members)):
        fixed = spec.zone_members.get(cluster, Counter())
        new_in: dict[int, list[cp_model.LinearExpr]] = defaultdict(list)
        pending = 0
        for bt in types:
            if bt.cluster != cluster:
                continue
            pending += len(bt.bundles) * len(bt.bundles[0].members)
            for pi, pattern in enumerate(bt.patterns):
                for child, n in pattern.placed_in().items():
                    new_in[child].append(n * m.x[(bt.index, pi)])
        upper = sum(fixed.values()) + pending
        most = model.new_int_var(0, upper, f"mostMembers[{cluster}]")
        model.add(most >= spec.zone_members_outside.get(cluster, 0))
        for c in children:
            model.add(most >= fixed[c] + sum(new_in[c], 0))
        zones = len(spec.children) + (1 if fixed[None] else 0)
        total = sum(fixed.values()) + sum((v for c in children for v in new_in[c]), 0)
        model.add(zones * most >= total)
        m.terms.append((weight, most))


def _sub_room_cuts(
    model: cp_model.CpModel,
    subs: tuple[SubRoom, ...],
    cluster: str,
    worst: object,
    masters: object,
    most_masters: int,
) -> None:
    """The child's masters of ``cluster`` fit in its sub-domains (racks), each holding at most
    the fullest's count (``worst``) and at most what its room allows: masters <= the sum over
    racks of min(room, worst). Where racks differ in size, the fullest then holds more than
    the even share. That sum is concave in ``worst`` and piecewise linear, so it is the least
    of its pieces' lines: one linear cut per distinct room, and no new variable (the first
    piece's, all racks at ``worst``, is the even share the caller adds). The racks' room is counted for each Redis
    cluster alone and memory aside: a relaxation, so the bound stays valid.

    A piece's cut can only bind below the even share when its smaller racks' room averages
    less than the even share of the most masters the child can hold (``most_masters``, or its
    whole room): the others are left out, so racks with room to spare add nothing."""
    rooms = sorted(sub.master_room + sub.fixed.get(cluster, 0) for sub in subs)
    most = min(most_masters, sum(rooms))
    full = 0  # room of the racks below this piece, each holding all it can
    below = 0
    for j, room in enumerate(rooms):
        if j and room > below and full * len(rooms) < most * j:
            # worst between the rooms below and this one: the j smallest racks hold their
            # room, the rest hold worst each.
            model.add(masters <= full + (len(rooms) - j) * worst)
        full += room
        below = room


def _soft_upper_bound(spec: LevelSpec, types: list[BundleType], policy: Policy, t_high: int) -> int:
    """More than any placement's soft cost at this level, so one unplaced pod outweighs it all."""
    w = policy.weights
    pods = sum(len(bt.bundles) * len(bt.bundles[0].members) for bt in types)
    masters = sum(len(bt.bundles) for bt in types) + sum(
        sum(c.values()) for c in spec.fixed_masters.values()
    )
    costliest = max((p.cost for bt in types for p in bt.patterns), default=0)
    bundles = sum(len(bt.bundles) for bt in types)
    members = pods + sum(sum(c.values()) for c in spec.zone_members.values())
    return (
        (w.survival + w.rack_survival) * (masters + 1)
        + w.member_spread * (members + 1)
        + costliest * bundles
        + w.load_balance * (t_high + 1)
        + pods
    )


def _add_hint(m: _Model, types: list[BundleType], settings: SolveSettings, spec: LevelSpec) -> None:
    hint = settings.hint or {}
    index = {(bt.index, p.counts): pi for bt in types for pi, p in enumerate(bt.patterns)}
    counts: Counter[tuple[int, int]] = Counter()
    for bt in types:
        for bundle in bt.bundles:
            if not all(member.key in hint for member in bundle.members):
                continue
            pattern_counts: Counter[tuple[int, int, Role]] = Counter()
            for member, kind in zip(bundle.members, bundle.kinds, strict=True):
                child, role = hint[member.key]
                pattern_counts[(child, kind, role)] += 1
            key = tuple(sorted((c, k, r, n) for (c, k, r), n in pattern_counts.items()))
            pi = index.get((bt.index, key))
            if pi is not None:
                counts[(bt.index, pi)] += 1
    for key, var in m.x.items():
        m.model.add_hint(var, counts.get(key, 0))
    if settings.hint_t is not None:
        # The hint's ceiling, or the kept one below it that gives the same room.
        below = [t for t, _ in m.levels if t <= settings.hint_t]
        chosen = below[-1] if below else None
        for t, b in m.levels:
            m.model.add_hint(b, int(t == chosen))


def _add_start(m: _Model, types: list[BundleType], spec: LevelSpec, rooms: Rooms) -> None:
    """balanced_start's counts as the search's start, at the highest ceiling (the room it
    counted with); nothing where it cannot place every bundle."""
    start = balanced_start(spec, rooms, types)
    if start is None:
        return
    for key, var in m.x.items():
        m.model.add_hint(var, start.get(key, 0))
    top = len(m.levels) - 1
    for i, (_, b) in enumerate(m.levels):
        m.model.add_hint(b, int(i == top))


def _decode(
    solver: cp_model.CpSolver, m: _Model, types: list[BundleType]
) -> tuple[dict[str, tuple[int, Role]], set[str]]:
    """Concrete members for the counts: bundles of a type in a stable order, patterns in order."""
    assignment: dict[str, tuple[int, Role]] = {}
    unplaced: set[str] = set()
    for bt in types:
        bundles = sorted(bt.bundles, key=lambda b: b.shard.key)
        cursor = 0
        for pi, pattern in enumerate(bt.patterns):
            count = int(solver.value(m.x[(bt.index, pi)]))
            for bundle in bundles[cursor : cursor + count]:
                _assign(bundle, pattern, assignment)
                if pattern.unplaced == len(bundle.members):
                    unplaced.add(bundle.shard.key)
            cursor += count
        for bundle in bundles[cursor:]:
            unplaced.add(bundle.shard.key)
    return assignment, unplaced


def _assign(bundle: Bundle, pattern: Pattern, out: dict[str, tuple[int, Role]]) -> None:
    """Hand the pattern's (child, kind, role) counts to the bundle's members."""
    wanted: dict[tuple[int, Role], list[int]] = defaultdict(list)
    for child, kind, role, n in pattern.counts:
        wanted[(kind, role)].extend([child] * n)
    # Labelled roles take their own entries first; undecided members take what is left.
    order = sorted(
        range(len(bundle.members)),
        key=lambda i: (bundle.roles[i] is None, bundle.members[i].key),
    )
    for i in order:
        kind, role = bundle.kinds[i], bundle.roles[i]
        options = [role] if role is not None else [Role.MASTER, Role.REPLICA]
        for r in options:
            slots = wanted.get((kind, r))
            if slots:
                child = slots.pop(0)
                if child != UNPLACED:
                    out[bundle.members[i].key] = (child, r)
                break


class _Watch(cp_model.CpSolverSolutionCallback):
    """Each better solution and bound, in the plan's own terms.

    Reports the soft objective (with the costs of what stays, ``settings.offset``) and its
    bound, the phase naming pods still unplaced. With a gap (relative or absolute) it stops
    the search once the gap is met lexicographically: the same unplaced pods and majority
    shortfall as the bound proves, and the soft cost within the gap. A plain relative gap on
    the weighted sum could stop with pods left out, since one weighs less than a share of many.
    """

    def __init__(
        self, solver: cp_model.CpSolver, settings: SolveSettings, big: int, big_short: int
    ) -> None:
        super().__init__()
        self.solver = solver
        self.settings = settings
        self.big, self.big_short = big, big_short
        self.best: int | None = None
        self.bound: int | None = None
        self.stopping = False
        """Whether a solution or bound within the gap stops the search (after ``PROOF_FIRST``)."""

    def _split(self, value: int) -> tuple[int, int, int]:
        return lexical_parts(value, self.big, self.big_short)

    def on_solution_callback(self) -> None:
        self.best = round(self.objective_value)
        self.bound = max(self.bound or 0, math.ceil(self.best_objective_bound - 1e-6))
        if self.settings.progress is not None:
            unplaced, _, soft = self._split(self.best)
            bound_unplaced, _, bound_soft = self._split(self.bound)
            objective = soft + self.settings.offset
            bound = bound_soft + self.settings.offset if bound_unplaced == unplaced else 0
            phase = self.settings.phase + (f" ({unplaced} pods unplaced)" if unplaced else "")
            self.settings.progress(phase, float(objective), float(bound))
        self._stop_within_gap()

    def on_bound(self, bound: float) -> None:
        self.bound = max(self.bound or 0, math.ceil(bound - 1e-6))
        self._stop_within_gap()

    def _stop_within_gap(self) -> None:
        if self.stopping and self.within_gap():
            self.solver.stop_search()

    def within_gap(self) -> bool:
        """The same unplaced pods and shortfall as the bound proves, the soft cost close."""
        settings = self.settings
        if not settings.stops_early() or self.best is None or self.bound is None:
            return False
        *lexical, soft = self._split(self.best)
        *bound_lexical, bound_soft = self._split(self.bound)
        allowed = max(settings.relative_gap * (soft + settings.offset), settings.absolute_gap)
        return lexical == bound_lexical and soft - bound_soft <= allowed
