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

import itertools
import math
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from ortools.sat.python import cp_model

from models.cluster import Member, Role
from models.policy import Level, Policy
from solver.levels.rooms import CPU, MEMORY, PODS, Rooms
from solver.levels.shapes import PendingShard

RELAXED_WEIGHT = 10_000
"""Cost of breaking a required separation level once relaxWhenInfeasible turned it into a penalty."""
MAX_PATTERNS = 20_000
"""Patterns enumerated per bundle type; beyond, only the most even spreads are kept."""
UNPLACED = -1
"""The child index of a member left unplaced (allowPartialShards only)."""

Progress = Callable[[str, float, float], None]
"""Called with (phase, objective, bound) as better solutions are found."""


@dataclass(frozen=True)
class Child:
    """One child domain of the parent: a zone of the cluster, or a rack of a zone."""

    name: str
    nodes: tuple[int, ...]
    """Room indexes (solver/levels/rooms.py) of its nodes that accept new members."""
    sub_domains: int
    """Domains of the next level down with room (racks of a zone): for lower bounds."""


@dataclass(frozen=True)
class Stay:
    """A member of the bundle's shard that stays where it runs, as this level sees it."""

    child: int | None
    """The child holding it, or None when it is outside the parent domain."""
    role: Role
    host: str
    sub_domain: str
    """Its domain one level down (its rack, seen from the zone level)."""


@dataclass
class Bundle:
    shard: PendingShard
    members: list[Member]
    kinds: list[int]
    roles: list[Role | None]
    """None: undecided, one of them becomes master (only when ``needs_master``)."""
    needs_master: bool
    stays: tuple[Stay, ...]
    whole: bool
    """Every member of the shard that could stay alive is inside the parent domain."""


@dataclass(frozen=True)
class Pattern:
    counts: tuple[tuple[int, int, Role, int], ...]
    """(child, kind, role, members); child UNPLACED for members left out."""
    master_child: int | None
    """Where the bundle's own pending master goes (None: no pending master)."""
    cost: int
    unplaced: int

    def placed_in(self) -> dict[int, int]:
        out: dict[int, int] = defaultdict(int)
        for child, _, _, n in self.counts:
            if child != UNPLACED:
                out[child] += n
        return out


@dataclass
class BundleType:
    index: int
    bundles: list[Bundle]
    patterns: list[Pattern]
    cluster: str
    pending_master: bool
    """Whether a placed bundle brings a new master (a labelled or chosen one)."""


@dataclass
class LevelSpec:
    level: Level
    children: list[Child]
    bundles: list[Bundle]
    fixed_masters: dict[str, Counter[int | None]]
    """Per Redis cluster: masters that stay, per child (None: outside the parent)."""
    fixed_outside_max: dict[str, int]
    """Per Redis cluster: the most masters that stay in one domain of this level that is not a
    child (a zone without room for new members, a rack of another zone)."""
    fixed_sub_masters: dict[str, int]
    """Per Redis cluster: the most masters that stay in one domain of the next level down."""
    masters_total: dict[str, int] | None
    """Per Redis cluster: its masters after this level, when already known (rack level)."""
    t_low: int
    partial: bool
    sub_level: Level | None
    strengths: dict[str, str]
    """Separation strength per level (rack, zone): required, preferred or ignore."""
    relaxed: frozenset[str] = frozenset()
    """Required levels turned into heavy penalties (relaxWhenInfeasible)."""


@dataclass
class LevelSolution:
    status: str
    """CP-SAT's status name."""
    assignment: dict[str, tuple[int, Role]]
    """Pod key -> (child index, role) for each placed pending member."""
    unplaced_shards: set[str]
    t: int
    objective: int
    bound: int
    big: int
    proven: bool

    def lower_bounds(self) -> tuple[int, int]:
        """(unplaced pods, soft cost when exactly that many are unplaced): valid lower bounds."""
        unplaced = self.bound // self.big
        return unplaced, self.bound - unplaced * self.big


# --------------------------------------------------------------------------- patterns


def _spreads(n: int, children: int, cap: list[int]) -> Iterator[tuple[int, ...]]:
    """Every way to put ``n`` identical members into the children, at most cap[c] in child c."""
    for combo in itertools.combinations_with_replacement(range(children), n):
        counts = Counter(combo)
        if all(counts[c] <= cap[c] for c in counts):
            yield tuple(counts.get(c, 0) for c in range(children))


def _even_spreads(n: int, children: int, cap: list[int]) -> Iterator[tuple[int, ...]]:
    """The spreads where no child holds more than one member above another: the fallback when
    there are too many spreads to enumerate."""
    base, extra = divmod(n, children)
    for chosen in itertools.combinations(range(children), extra):
        counts = tuple(base + (1 if c in chosen else 0) for c in range(children))
        if all(counts[c] <= cap[c] for c in range(children)):
            yield counts


def _count_spreads(n: int, children: int) -> int:
    from math import comb

    return comb(n + children - 1, children - 1) if children else 0


def _role_assignments(bundle: Bundle) -> list[Counter[tuple[int, Role]]]:
    """The (kind, role) multisets the bundle can take: one per kind an undecided master may have."""
    fixed: Counter[tuple[int, Role]] = Counter()
    undecided: Counter[int] = Counter()
    for kind, role in zip(bundle.kinds, bundle.roles, strict=True):
        if role is None:
            undecided[kind] += 1
        else:
            fixed[(kind, role)] += 1
    if not undecided:
        return [fixed]
    if not bundle.needs_master:
        out = Counter(fixed)
        for kind, n in undecided.items():
            out[(kind, Role.REPLICA)] += n
        return [out]
    choices = []
    for master_kind in sorted(undecided):
        out = Counter(fixed)
        for kind, n in undecided.items():
            if kind == master_kind:
                out[(kind, Role.MASTER)] += 1
                if n > 1:
                    out[(kind, Role.REPLICA)] += n - 1
            else:
                out[(kind, Role.REPLICA)] += n
        choices.append(out)
    return choices


class _PatternJudge:
    """Filters and prices the patterns of one bundle type: the rules' faces at this level."""

    def __init__(self, spec: LevelSpec, rooms: Rooms, policy: Policy) -> None:
        self.spec = spec
        self.rooms = rooms
        self.weights = policy.weights
        self.survive = policy.rules.survive
        self.hosts: dict[tuple[int, int | None], int] = {}

    def host_room(self, child: int, kind: int | None) -> int:
        key = (child, kind)
        if key not in self.hosts:
            self.hosts[key] = self.rooms.hosts(list(self.spec.children[child].nodes), kind)
        return self.hosts[key]

    def separation(self, level: Level) -> tuple[str, int]:
        """(strength, cost per replica sharing its master's domain) at ``level``."""
        if level in self.spec.relaxed:
            return "preferred", RELAXED_WEIGHT
        strength = self.spec.strengths.get(level, "ignore")
        return strength, self.weights.separation(level) if strength == "preferred" else 0

    def judge(self, bundle: Bundle, counts: dict[tuple[int, int, Role], int]) -> Pattern | None:
        spec = self.spec
        placed_per_child: Counter[int] = Counter()
        per_kind_child: Counter[tuple[int, int]] = Counter()
        master_child: int | None = None
        unplaced = 0
        placed_master = False
        placed_any = False
        for (child, kind, role), n in counts.items():
            if child == UNPLACED:
                unplaced += n
                continue
            placed_any = placed_any or n > 0
            placed_per_child[child] += n
            per_kind_child[(kind, child)] += n
            if role is Role.MASTER:
                master_child = child
                placed_master = True
        # The bundle's own master must be placed for any of its other members to be.
        brings_master = (
            any(r is Role.MASTER or r is None for r in bundle.roles) and bundle.needs_master
        )
        labelled_master = any(r is Role.MASTER for r in bundle.roles)
        if (brings_master or labelled_master) and placed_any and not placed_master:
            return None
        stays_in: Counter[int] = Counter(s.child for s in bundle.stays if s.child is not None)
        stay_hosts: dict[int, set[str]] = defaultdict(set)
        for s in bundle.stays:
            if s.child is not None:
                stay_hosts[s.child].add(s.host)
        # fits at this level: the kind is accepted somewhere in the child, on distinct hosts.
        for (kind, child), n in per_kind_child.items():
            if n > self.host_room(child, kind) - len(stay_hosts[child]):
                return None
        for child, n in placed_per_child.items():
            if n > self.host_room(child, None) - len(stay_hosts[child]):
                return None
        # survive: the shard keeps a member when any one domain fails, so it needs two members
        # alive at least, on distinct hosts, whatever the level.
        if (
            self.survive != "none"
            and placed_any
            and sum(placed_per_child.values()) + len(bundle.stays) < 2
        ):
            return None
        level = spec.level
        if self.survive == level and bundle.whole and placed_any:
            alive = set(placed_per_child) | set(stays_in)
            if len(alive) <= 1:
                return None
        if (
            spec.sub_level is not None
            and self.survive == spec.sub_level
            and bundle.whole
            and placed_any
        ):
            alive = set(placed_per_child) | set(stays_in)
            outside = any(s.child is None for s in bundle.stays)
            if not outside and len(alive) == 1:
                (only,) = alive
                racks = {s.sub_domain for s in bundle.stays if s.child == only}
                if spec.children[only].sub_domains + len(racks) <= 1:
                    return None
        # separation at this level and a lower bound of the next one.
        cost = 0
        fixed_master = next((s for s in bundle.stays if s.role is Role.MASTER), None)
        if master_child is not None:
            home: int | None = master_child
            together = counts_role(counts, home, Role.REPLICA) + sum(
                1 for s in bundle.stays if s.role is Role.REPLICA and s.child == home
            )
        elif fixed_master is not None and fixed_master.child is not None:
            home = fixed_master.child
            together = counts_role(counts, home, Role.REPLICA)
        else:
            home, together = None, 0
        if home is not None and together:
            strength, weight = self.separation(level)
            if strength == "required":
                return None
            cost += weight * together
            # One level down: a child with a single sub-domain with room holds the pending
            # master and its pending replicas there together.
            forced = counts_role(counts, home, Role.REPLICA) if master_child is not None else 0
            if forced and spec.sub_level is not None and spec.children[home].sub_domains <= 1:
                sub_strength, sub_weight = self.separation(spec.sub_level)
                if sub_strength == "required":
                    return None
                cost += sub_weight * forced
        return Pattern(
            counts=tuple(sorted((c, k, r, n) for (c, k, r), n in counts.items() if n)),
            master_child=master_child,
            cost=cost,
            unplaced=unplaced,
        )


def counts_role(counts: dict[tuple[int, int, Role], int], child: int, role: Role) -> int:
    return sum(n for (c, _, r), n in counts.items() if c == child and r is role)


def enumerate_patterns(bundle: Bundle, spec: LevelSpec, judge: _PatternJudge) -> list[Pattern]:
    """Every valid pattern of a bundle type, cheapest structure first, deduplicated."""
    children = len(spec.children)
    options = children + (1 if spec.partial else 0)
    seen: dict[tuple[object, ...], Pattern] = {}
    for roles in _role_assignments(bundle):
        groups = sorted(roles.items(), key=lambda kv: (kv[0][0], kv[0][1].value))
        total = 1
        for _, n in groups:
            total *= _count_spreads(n, options)
        per_group: list[list[tuple[int, ...]]] = []
        for (kind, _role), n in groups:
            cap = [judge.host_room(c, kind) for c in range(children)]
            if spec.partial:
                cap.append(n)
            spread = _spreads if total <= MAX_PATTERNS else _even_spreads
            per_group.append(list(spread(n, options, cap)))
        for combo in itertools.product(*per_group):
            counts: dict[tuple[int, int, Role], int] = {}
            for ((kind, role), _), spread_counts in zip(groups, combo, strict=True):
                for c, n in enumerate(spread_counts):
                    if n:
                        child = UNPLACED if c == children else c
                        counts[(child, kind, role)] = counts.get((child, kind, role), 0) + n
            pattern = judge.judge(bundle, counts)
            if pattern is not None:
                seen.setdefault(pattern.counts, pattern)
            if len(seen) >= MAX_PATTERNS:
                break
    return sorted(seen.values(), key=lambda p: (p.unplaced, p.cost, p.counts))


def _type_key(bundle: Bundle) -> tuple[object, ...]:
    slots = tuple(
        sorted(zip(bundle.kinds, [r.value if r else "" for r in bundle.roles], strict=True))
    )
    stays = tuple(
        sorted(
            (s.child if s.child is not None else -2, s.role.value, s.host, s.sub_domain)
            for s in bundle.stays
        )
    )
    return (bundle.shard.cluster, slots, bundle.needs_master, stays, bundle.whole)


def bundle_types(spec: LevelSpec, rooms: Rooms, policy: Policy) -> list[BundleType]:
    judge = _PatternJudge(spec, rooms, policy)
    grouped: dict[tuple[object, ...], BundleType] = {}
    types: list[BundleType] = []
    for bundle in spec.bundles:
        key = _type_key(bundle)
        bt = grouped.get(key)
        if bt is None:
            pending_master = bundle.needs_master or any(r is Role.MASTER for r in bundle.roles)
            bt = BundleType(
                index=len(types),
                bundles=[],
                patterns=enumerate_patterns(bundle, spec, judge),
                cluster=bundle.shard.cluster,
                pending_master=pending_master,
            )
            grouped[key] = bt
            types.append(bt)
        bt.bundles.append(bundle)
    return types


# --------------------------------------------------------------------------- the model


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


@dataclass
class _Model:
    model: cp_model.CpModel = field(default_factory=cp_model.CpModel)
    x: dict[tuple[int, int], cp_model.IntVar] = field(default_factory=dict)
    t: cp_model.IntVar | None = None
    levels: list[tuple[int, cp_model.IntVar]] = field(default_factory=list)
    terms: list[tuple[int, object]] = field(default_factory=list)
    unplaced_terms: list[object] = field(default_factory=list)


def _ceiling_sum(
    tables: list[int], levels: list[tuple[int, cp_model.IntVar]], t_low: int
) -> object:
    """sum over ceilings of table[ceiling] * [t == ceiling], for the model's t indicators."""
    return sum((tables[t - t_low] * b for t, b in levels if tables[t - t_low]), 0)


def solve_level(
    spec: LevelSpec, rooms: Rooms, policy: Policy, settings: SolveSettings
) -> LevelSolution:
    """Build and solve one level; every bundle ends in a child, or unplaced with its shard."""
    types = bundle_types(spec, rooms, policy)
    weights = policy.weights
    m = _Model()
    model = m.model
    children = spec.children
    load_weight = weights.load_balance
    t_high = rooms.ceiling
    t_low = min(max(spec.t_low, rooms.floor), t_high)
    ceilings = list(range(t_low, t_high + 1)) if load_weight else [t_high]
    base = rooms.floor
    for t in ceilings:
        m.levels.append((t, model.new_bool_var(f"t[{t}]")))
    model.add_exactly_one(b for _, b in m.levels)
    m.t = model.new_int_var(ceilings[0], ceilings[-1], "t")
    model.add(m.t == sum(t * b for t, b in m.levels))

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
        pods = len(bt.bundles[0].members)
        unplaced_pods.append(pods * (n - placed))

    # Capacity per child, at the chosen ceiling.
    for ci, child in enumerate(children):
        nodes = list(child.nodes)
        demand: dict[int, list[object]] = defaultdict(list)
        master_demand: dict[int, list[object]] = defaultdict(list)
        for bt in types:
            for pi, pattern in enumerate(bt.patterns):
                for c, kind, role, n in pattern.counts:
                    if c != ci:
                        continue
                    demand[kind].append(n * m.x[(bt.index, pi)])
                    if role is Role.MASTER:
                        master_demand[kind].append(n * m.x[(bt.index, pi)])
        for kind, parts in demand.items():
            table = _sliced(rooms.table(nodes, kind), base, ceilings)
            model.add(sum(parts, 0) <= _ceiling_sum(table, m.levels, ceilings[0]))
        for kind, parts in master_demand.items():
            table = _sliced(rooms.table(nodes, kind, master=True), base, ceilings)
            model.add(sum(parts, 0) <= _ceiling_sum(table, m.levels, ceilings[0]))
        all_masters = [p for parts in master_demand.values() for p in parts]
        if len(master_demand) > 1:
            room = sum(max(0, rooms.cap - rooms.nodes[i].masters) for i in nodes)
            model.add(sum(all_masters, 0) <= room)
        if len(demand) > 1:
            units = rooms.units
            memory = _sliced(rooms.memory_table(nodes), base, ceilings)
            need = [
                (rooms.kinds[k].requests[MEMORY] // units[MEMORY]) * p
                for k, parts in demand.items()
                for p in parts
            ]
            model.add(sum(need, 0) <= _ceiling_sum(memory, m.levels, ceilings[0]))
            for resource in (CPU, PODS):
                need = [
                    (rooms.kinds[k].requests[resource] // units[resource]) * p
                    for k, parts in demand.items()
                    for p in parts
                ]
                model.add(sum(need, 0) <= rooms.total(nodes, resource))

    # Masters per Redis cluster and child: survive's majority and the survival cost.
    _cluster_rules(m, spec, types, policy)

    m.terms.append((load_weight, m.t))
    upper = _soft_upper_bound(spec, types, policy, t_high)
    big = upper + 1
    terms = [(weight, expr) for weight, expr in m.terms if weight]
    soft = cp_model.LinearExpr.weighted_sum([e for _, e in terms], [w for w, _ in terms])
    model.minimize(big * sum(unplaced_pods, 0) + soft)

    if settings.hint is not None:
        _add_hint(m, types, settings, spec)

    solver = cp_model.CpSolver()
    params = solver.parameters
    params.max_time_in_seconds = max(0.05, settings.time_limit)
    params.num_workers = max(1, settings.workers)
    params.random_seed = settings.seed
    # One worker and a deterministic budget: the same input gives the same plan.
    params.max_deterministic_time = max(0.05, settings.time_limit)
    # The models are small and their LP relaxation is strong; full linearization lets one
    # worker prove what otherwise takes a portfolio (docs/benchmarks.md).
    params.linearization_level = 2
    params.log_search_progress = False
    callback = _Reporter(settings, big) if settings.progress else None
    code = solver.solve(model, callback)
    status = solver.status_name(code)
    if code not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        return LevelSolution(
            status, {}, {b.shard.key for b in spec.bundles}, t_high, 0, 0, big, False
        )
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
        proven=code == cp_model.OPTIMAL,
    )


def _sliced(table: list[int], base: int, ceilings: list[int]) -> list[int]:
    """The table's entries for the model's ceilings (tables start at rooms.floor)."""
    start = ceilings[0] - base
    return table[start : start + len(ceilings)]


def _cluster_rules(m: _Model, spec: LevelSpec, types: list[BundleType], policy: Policy) -> None:
    model = m.model
    survive = policy.rules.survive
    survival_level: Level = "zone" if survive == "none" else survive
    weight = policy.weights.survival
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
            for c in children:
                allowed = max(-1, 2 * fixed[c] - fixed_total) if fixed_total else -1
                if not new_in[c]:
                    continue
                ct = model.add(2 * masters_in[c] - total <= allowed)
                if active is not None:
                    ct.only_enforce_if(active)
        # survive at any level: one domain holds a master at least, so a strict majority
        # outside it needs three masters or more.
        if survive != "none" and spec.masters_total is None and not fixed_total and new_total:
            active = model.new_bool_var(f"any_master[{cluster}]")
            model.add(sum(new_total, 0) >= 1).only_enforce_if(active)
            model.add(sum(new_total, 0) == 0).only_enforce_if(active.negated())
            model.add(sum(new_total, 0) >= 3).only_enforce_if(active)
        # survival: the masters the worst single failure takes, per cluster. Exact at its own
        # level; one level up, a child's masters spread over its sub-domains at best.
        if not weight or not (new_total or fixed_total):
            continue
        if survival_level not in (spec.level, spec.sub_level):
            continue
        upper = fixed_total + sum(len(bt.bundles) for bt in cluster_types)
        most = model.new_int_var(0, upper, f"worst[{cluster}]")
        if survival_level == spec.level:
            model.add(most >= spec.fixed_outside_max.get(cluster, 0))
            for c in children:
                model.add(most >= masters_in[c])
        else:
            model.add(most >= spec.fixed_sub_masters.get(cluster, 0))
            for c in children:
                model.add(max(1, spec.children[c].sub_domains) * most >= masters_in[c])
        m.terms.append((weight, most))


def _soft_upper_bound(spec: LevelSpec, types: list[BundleType], policy: Policy, t_high: int) -> int:
    """More than any placement's soft cost at this level, so one unplaced pod outweighs it all."""
    w = policy.weights
    pods = sum(len(bt.bundles) * len(bt.bundles[0].members) for bt in types)
    masters = sum(len(bt.bundles) for bt in types) + sum(
        sum(c.values()) for c in spec.fixed_masters.values()
    )
    costliest = max((p.cost for bt in types for p in bt.patterns), default=0)
    bundles = sum(len(bt.bundles) for bt in types)
    return w.survival * (masters + 1) + costliest * bundles + w.load_balance * (t_high + 1) + pods


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
        for t, b in m.levels:
            m.model.add_hint(b, int(t == settings.hint_t))


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
                if pattern.unplaced:
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


class _Reporter(cp_model.CpSolverSolutionCallback):
    def __init__(self, settings: SolveSettings, big: int) -> None:
        super().__init__()
        self.settings = settings
        self.big = big
        self.start = time.monotonic()

    def on_solution_callback(self) -> None:
        assert self.settings.progress is not None
        self.settings.progress(self.settings.phase, self.objective_value, self.best_objective_bound)
