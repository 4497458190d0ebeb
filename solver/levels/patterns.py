"""The rules' faces at one level: which patterns a bundle may take, and what each costs.

Distinct hosts, required separation and a shard kept alive when one domain fails filter the
patterns; preferred separation (and a lower bound of the next level's) prices them. Every
filter holds for every real placement, so the level model stays a relaxation.
"""

import itertools
import time
from collections import Counter, defaultdict
from collections.abc import Iterator

from models.cluster import Role
from models.policy import Level, Policy
from solver.levels.rooms import Rooms
from solver.levels.spec import UNPLACED, Bundle, BundleType, LevelSpec, Pattern

RELAXED_WEIGHT = 10_000
"""Cost of breaking a required separation level once relaxWhenInfeasible turned it into a penalty."""
MAX_PATTERNS = 20_000
"""Patterns enumerated per bundle type; beyond, only the most even spreads are kept."""
CHECK_EVERY = 512
"""Patterns judged between two looks at the clock."""


class OutOfTime(Exception):
    """A level's model could not be built within its budget (a large rack level late in the
    limit): the caller treats the level as unsolved, as when CP-SAT finds nothing in time."""


def check_time(until: float | None) -> None:
    if until is not None and time.monotonic() > until:
        raise OutOfTime


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
            and bundle.whole
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


def enumerate_patterns(
    bundle: Bundle, spec: LevelSpec, judge: _PatternJudge, until: float | None = None
) -> list[Pattern]:
    """Every valid pattern of a bundle type, cheapest structure first, deduplicated; raises
    OutOfTime past ``until``."""
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
        for tried, combo in enumerate(itertools.product(*per_group)):
            if tried % CHECK_EVERY == 0:
                check_time(until)
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
    # The cluster first: the rest is the shape that decides the patterns.
    return (bundle.shard.cluster, slots, bundle.needs_master, stays, bundle.whole)


def bundle_types(
    spec: LevelSpec, rooms: Rooms, policy: Policy, until: float | None = None
) -> list[BundleType]:
    judge = _PatternJudge(spec, rooms, policy)
    grouped: dict[tuple[object, ...], BundleType] = {}
    types: list[BundleType] = []
    # A type's patterns do not depend on its Redis cluster (the rules that count per cluster
    # are the model's, over the patterns): the types of many clusters share one enumeration.
    patterns: dict[tuple[object, ...], list[Pattern]] = {}
    for bundle in spec.bundles:
        key = _type_key(bundle)
        bt = grouped.get(key)
        if bt is None:
            pending_master = bundle.needs_master or any(r is Role.MASTER for r in bundle.roles)
            shape = key[1:]
            if shape not in patterns:
                patterns[shape] = enumerate_patterns(bundle, spec, judge, until)
            bt = BundleType(
                index=len(types),
                bundles=[],
                patterns=patterns[shape],
                cluster=bundle.shard.cluster,
                pending_master=pending_master,
            )
            grouped[key] = bt
            types.append(bt)
        bt.bundles.append(bundle)
    return types


# --------------------------------------------------------------------------- the model
