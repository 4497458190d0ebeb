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

from models.cluster import Role
from solver.levels.rooms import MEMORY, Rooms
from solver.levels.spec import UNPLACED, BundleType, LevelSpec

SLICES = 16
"""Slices a type's bundles are placed in: each slice on one pattern, so that a type's bundles
spread over the children without a choice per bundle."""


class _Room:
    """What the children can still take at the highest ceiling, and what each cluster has where."""

    def __init__(self, spec: LevelSpec, rooms: Rooms, kinds: set[int]) -> None:
        self.rooms = rooms
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

    def fits(self, counts: tuple[tuple[int, int, Role, int], ...], k: int) -> bool:
        kind: Counter[tuple[int, int]] = Counter()
        master: Counter[tuple[int, int]] = Counter()
        memory: Counter[int] = Counter()
        for c, kd, role, n in counts:
            if c == UNPLACED:
                continue
            kind[(c, kd)] += k * n
            memory[c] += k * n * self.need[kd]
            if role is Role.MASTER:
                master[(c, kd)] += k * n
        return (
            all(v <= self.kind[key] for key, v in kind.items())
            and all(v <= self.master[key] for key, v in master.items())
            and all(v <= self.memory[c] for c, v in memory.items())
        )

    def take(self, cluster: str, counts: tuple[tuple[int, int, Role, int], ...], k: int) -> None:
        for c, kd, role, n in counts:
            if c == UNPLACED:
                continue
            self.kind[(c, kd)] -= k * n
            self.memory[c] -= k * n * self.need[kd]
            self.members[(cluster, c)] += k * n
            if role is Role.MASTER:
                self.master[(c, kd)] -= k * n
                self.masters[(cluster, c)] += k * n

    def score(
        self, cluster: str, counts: tuple[tuple[int, int, Role, int], ...], k: int
    ) -> tuple[int, int, float]:
        """Masters of the cluster where the master goes, its fullest child's members, the
        fullest child's load: lower is better, each after the slice."""
        masters = 0
        members: Counter[int] = Counter()
        memory: Counter[int] = Counter()
        for c, kd, role, n in counts:
            if c == UNPLACED:
                continue
            members[c] += k * n
            memory[c] += k * n * self.need[kd]
            if role is Role.MASTER:
                masters = max(masters, self.masters[(cluster, c)] + k)
        fullest = max((self.members[(cluster, c)] + n for c, n in members.items()), default=0)
        load = max(
            (1 - (self.memory[c] - need) / self.memory_total[c] for c, need in memory.items()),
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
            k = _slice(bt, placing[bt.index], room, min(size[bt.index], left[bt.index]))
            if k is None:
                return None
            size[bt.index] = min(size[bt.index], k[0])
            pi = k[1]
            room.take(bt.cluster, bt.patterns[pi].counts, k[0])
            start[(bt.index, pi)] += k[0]
            left[bt.index] -= k[0]
    return start


def _slice(bt: BundleType, placing: list[int], room: _Room, k: int) -> tuple[int, int] | None:
    """(bundles, pattern) of the type's next slice: the best pattern that fits ``k`` bundles,
    or fewer where none does; None where not even one fits anywhere."""
    while True:
        best: tuple[tuple[int, int, int, float], int] | None = None
        for pi in placing:
            pattern = bt.patterns[pi]
            if not room.fits(pattern.counts, k):
                continue
            key = (pattern.cost, *room.score(bt.cluster, pattern.counts, k))
            if best is None or key < best[0]:
                best = (key, pi)
        if best is not None:
            return k, best[1]
        if k == 1:
            return None
        k = max(1, k // 2)
