"""A start for level one when no placement seeds it: every bundle on a cheap pattern that fits.

Without a start, CP-SAT's first solutions of a zone model of many Redis clusters leave pods
unplaced for seconds (150 clusters of 100 shards on 15,000 nodes: still 243 pods out after 4.5
s, and the plan 6 % above its bound), while the same model started from greedy's plan is within
0.4 % of its bound at once. Greedy itself takes seconds there; this start is counts only: the
bundles of a type go, a slice at a time, to the cheapest of their patterns that still fits the
children's room at the highest ceiling, the master to the child holding the fewest masters of
its Redis cluster, the members to the children holding fewest of its members, then the least
loaded. It is only a hint: CP-SAT keeps what is valid and improves on it.
"""

import math
from collections import Counter
from dataclasses import dataclass, field

from models.cluster import Role
from solver.levels.rooms import MEMORY, Rooms
from solver.levels.spec import UNPLACED, BundleType, LevelSpec

SLICES = 16
"""Slices a type's bundles are placed in: each slice on one pattern, so that a type's bundles
spread over the children without a choice per bundle."""


Counts = tuple[tuple[int, int, Role, int], ...]
"""A pattern's (child, kind, role, members)."""


@dataclass
class _Demand:
    """What a slice of ``k`` bundles on one pattern asks of each child."""

    kind: Counter[tuple[int, int]] = field(default_factory=Counter)
    master: Counter[tuple[int, int]] = field(default_factory=Counter)
    memory: Counter[int] = field(default_factory=Counter)
    members: Counter[int] = field(default_factory=Counter)
    masters: Counter[int] = field(default_factory=Counter)


class _Room:
    """What the children can still take at the highest ceiling, and what each cluster has where."""

    def __init__(self, spec: LevelSpec, rooms: Rooms, kinds: set[int]) -> None:
        self.kind: dict[tuple[int, int], int] = {}
        self.master: dict[tuple[int, int], int] = {}
        self.memory: list[int] = []
        self.memory_total: list[int] = []
        for c, child in enumerate(spec.children):
            nodes = list(child.nodes)
            for k in kinds:
                self.kind[(c, k)] = rooms.table(nodes, k)[-1]
                self.master[(c, k)] = rooms.table(nodes, k, master=True)[-1]
            room = rooms.memory_table(nodes)[-1]
            self.memory.append(room)
            self.memory_total.append(max(1, room))
        self.need = {k: rooms.kinds[k].requests[MEMORY] // rooms.units[MEMORY] for k in kinds}
        self.masters: Counter[tuple[str, int]] = Counter()
        self.members: Counter[tuple[str, int]] = Counter()

    def demand(self, counts: Counts, k: int) -> _Demand:
        out = _Demand()
        for c, kd, role, n in counts:
            if c == UNPLACED:
                continue
            out.kind[(c, kd)] += k * n
            out.memory[c] += k * n * self.need[kd]
            out.members[c] += k * n
            if role is Role.MASTER:
                out.master[(c, kd)] += k * n
                out.masters[c] += k * n
        return out

    def fits(self, demand: _Demand) -> bool:
        return (
            all(v <= self.kind[key] for key, v in demand.kind.items())
            and all(v <= self.master[key] for key, v in demand.master.items())
            and all(v <= self.memory[c] for c, v in demand.memory.items())
        )

    def take(self, cluster: str, demand: _Demand) -> None:
        for key, v in demand.kind.items():
            self.kind[key] -= v
        for key, v in demand.master.items():
            self.master[key] -= v
        for c, v in demand.memory.items():
            self.memory[c] -= v
        for c, v in demand.members.items():
            self.members[(cluster, c)] += v
        for c, v in demand.masters.items():
            self.masters[(cluster, c)] += v

    def score(self, cluster: str, demand: _Demand) -> tuple[int, int, float]:
        """Masters of the cluster where the master goes, its fullest child's members, the
        fullest child's load: lower is better, each after the slice."""
        masters = max(
            (self.masters[(cluster, c)] + n for c, n in demand.masters.items()), default=0
        )
        fullest = max(
            (self.members[(cluster, c)] + n for c, n in demand.members.items()), default=0
        )
        load = max(
            (1 - (self.memory[c] - n) / self.memory_total[c] for c, n in demand.memory.items()),
            default=0.0,
        )
        return masters, fullest, load


def balanced_start(
    spec: LevelSpec, rooms: Rooms, types: list[BundleType]
) -> Counter[tuple[int, int]] | None:
    """(type index, pattern index) -> bundles: a start that places every bundle, spread
    evenly; None where it cannot place them all. Choosing which shards to leave out is what
    the search does better (the 300-node clusters of benchmarks/unseen.py, a third of their
    pods left out: with a partial start 339 pods unplaced in one, 330 without).

    The types take turns, a slice each, so that where the small zones' room runs out it runs
    out for every Redis cluster alike (one type after the other left the last clusters' masters
    all in the largest zone where every node must take a master: 11 % above the bound)."""
    kinds = {k for bt in types for k in bt.bundles[0].kinds}
    room = _Room(spec, rooms, kinds)
    start: Counter[tuple[int, int]] = Counter()
    placing: dict[int, list[int]] = {}
    left: dict[int, int] = {}
    size: dict[int, int] = {}
    for bt in types:
        placing[bt.index] = [pi for pi, p in enumerate(bt.patterns) if not p.unplaced]
        if not placing[bt.index]:
            return None
        left[bt.index] = len(bt.bundles)
        size[bt.index] = max(1, math.ceil(len(bt.bundles) / SLICES))
    while any(left.values()):
        for bt in types:
            if not left[bt.index]:
                continue
            chosen = _slice(bt, placing[bt.index], room, min(size[bt.index], left[bt.index]))
            if chosen is None:
                return None
            n, pi, demand = chosen
            size[bt.index] = min(size[bt.index], n)
            room.take(bt.cluster, demand)
            start[(bt.index, pi)] += n
            left[bt.index] -= n
    return start


def _slice(
    bt: BundleType, placing: list[int], room: _Room, k: int
) -> tuple[int, int, _Demand] | None:
    """(bundles, pattern, demand) of the type's next slice: the best pattern that fits ``k``
    bundles, or fewer where none does; None where not even one fits anywhere."""
    while True:
        best: tuple[tuple[int, int, int, float], int, _Demand] | None = None
        for pi in placing:
            pattern = bt.patterns[pi]
            demand = room.demand(pattern.counts, k)
            if not room.fits(demand):
                continue
            key = (pattern.cost, *room.score(bt.cluster, demand))
            if best is None or key < best[0]:
                best = (key, pi, demand)
        if best is not None:
            return k, best[1], best[2]
        if k == 1:
            return None
        k = max(1, k // 2)
