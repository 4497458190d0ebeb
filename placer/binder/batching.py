"""How many pending pods go into one solve, from how fast the solver has been at each size.

A large arrival is cut into batches so the first shards bind while the next batch is solved.
The solver's speed is measured per batch size, in powers of two (1, 2-3, 4-7, ... pods): each
solve's seconds per pending pod feed an exponentially weighted average for its size. A solve is
rarely linear in its batch: a fixed cost per call makes small batches dear per pod, and a solver
may take another path for larger batches altogether, so one average over all sizes would steer
towards the wrong size. A size not measured yet is taken to cost what the nearest smaller
measured size does.

Two sizes are asked for. ``pods``: the largest batch expected to solve within
``target_seconds``, for shards that should bind soon. ``most(budget)``: for a backlog (more
shards waiting than that), the size with the fewest seconds per pod that fits in most of the
budget; the next size up, not tried yet, is given the benefit of the doubt (half the best cost
per pod seen), so larger sizes get measured while there is a backlog to measure them on.

A solve that ran out of its time budget says how long the budget is, not how fast the solver
is, and does not move the averages. What it says is how good an answer that size gets in the
budget. A good one (CP-SAT's own solution, within ``good_gap`` of its bound): the next solve
costs the budget too, whatever its size, so batches are at least that large. A poor one
(nothing of CP-SAT's own, or far from its bound): that size is more than the solver handles in
its budget, so batches are kept below half of it until solves end in time again.
"""

from dataclasses import dataclass, field

SOLVER_BOUND_STATUSES = frozenset({"OPTIMAL", "INFEASIBLE"})
"""Statuses that end a solve before its budget: proven, so the time is the solver's own."""


def relative_gap(objective: float, bound: float) -> float:
    """How far an answer may be from the best possible, as a share of the answer."""
    if objective <= bound:
        return 0.0
    return (objective - bound) / max(abs(objective), 1e-9)


def size_class(pods: int) -> int:
    """0 for 1 pod, 1 for 2-3, 2 for 4-7, ...: sizes whose speed is averaged together."""
    return max(pods, 1).bit_length() - 1


@dataclass
class BatchSizer:
    target_seconds: float = 0.5
    max_pods: int = 600
    """The largest batch, whatever the speed (the binder's batches are small-batch solves)."""
    min_pods: int = 1
    smoothing: float = 0.5
    """Weight of the newest solve in a size's average."""
    good_gap: float = 0.05
    seconds_per_pod: float = 0.002
    """The estimate for every size before any solve of it or of a smaller size."""
    speeds: dict[int, float] = field(default_factory=dict)
    """Seconds per pending pod, averaged per size class."""
    floor_pods: int = 1
    """Raised by good solves that used their whole budget: a batch costs it whatever its size."""
    ceiling_pods: int = 0
    """Lowered by poor solves that used their whole budget (0: ``max_pods``)."""
    over_budget: set[int] = field(default_factory=set)
    """Size classes that ran out of budget: not tried again on the benefit of the doubt."""

    def __post_init__(self) -> None:
        if self.target_seconds <= 0:
            raise ValueError("target_seconds must be positive")
        if not 0 < self.smoothing <= 1:
            raise ValueError("smoothing must be in (0, 1]")
        if self.max_pods < self.min_pods or self.min_pods < 1:
            raise ValueError("need 1 <= min_pods <= max_pods")
        self.ceiling_pods = self.ceiling_pods or self.max_pods

    @property
    def largest(self) -> int:
        return max(self.min_pods, min(self.max_pods, self.ceiling_pods))

    def speed(self, pods: int) -> float:
        """Expected seconds per pod for a batch of ``pods``."""
        known = size_class(pods)
        smaller = [c for c in self.speeds if c <= known]
        if smaller:
            return self.speeds[max(smaller)]
        return min(self.speeds.values(), default=self.seconds_per_pod)

    def _classes(self) -> list[tuple[int, int]]:
        """(smallest, largest) batch of each size class, up to ``largest``."""
        top = self.largest
        return [
            (max(self.min_pods, 1 << c), min(top, (1 << (c + 1)) - 1))
            for c in range(size_class(top) + 1)
            if min(top, (1 << (c + 1)) - 1) >= self.min_pods
        ]

    @property
    def pods(self) -> int:
        """The largest batch expected to solve within ``target_seconds`` (at least one shard
        is always taken, whatever this says)."""
        wanted = self.min_pods
        for low, high in self._classes():
            fits = min(high, int(self.target_seconds / max(self.speed(low), 1e-9)))
            if fits >= low:
                wanted = max(wanted, fits)
        return max(self.min_pods, min(self.largest, max(wanted, self.floor_pods)))

    def most(self, budget: float | None) -> int:
        """The batch for a backlog: the fewest seconds per pod that fits in most of ``budget``.

        The size class just above the largest measured one is given the benefit of the doubt,
        half the fastest measured cost per pod (twice the pods over the same fixed cost), so a
        backlog tries it and the averages learn it."""
        measured = max(self.speeds, default=-1)
        best = min(self.speeds.values(), default=self.seconds_per_pod)
        choices: list[tuple[float, int]] = []
        for low, high in self._classes():
            c = size_class(low)
            explore = c == measured + 1 and c not in self.over_budget
            per_pod = best / 2 if explore else self.speed(low)
            size = high if budget is None else min(high, int(0.8 * budget / max(per_pod, 1e-9)))
            if size >= low:
                choices.append((per_pod, -size))
        if not choices:
            return self.pods
        return max(self.pods, -min(choices)[1])

    def observe(
        self,
        pods: int,
        seconds: float,
        status: str,
        budget: float | None,
        objective: float = 0.0,
        bound: float = 0.0,
    ) -> None:
        """Learn from one solve of ``pods`` pending pods that took ``seconds``."""
        if pods <= 0 or seconds < 0:
            return
        out_of_budget = (
            budget is not None and status not in SOLVER_BOUND_STATUSES and seconds >= 0.9 * budget
        )
        if out_of_budget:
            self.over_budget.add(size_class(pods))
            if status == "FEASIBLE" and relative_gap(objective, bound) <= self.good_gap:
                self.floor_pods = min(self.max_pods, max(self.floor_pods, pods))
            else:
                self.ceiling_pods = max(self.min_pods, pods // 2)
                self.floor_pods = self.min_pods
            return
        self.floor_pods = self.min_pods
        self.ceiling_pods = min(self.max_pods, max(self.ceiling_pods, 2 * pods))
        sample = seconds / pods
        c = size_class(pods)
        self.over_budget.discard(c)
        current = self.speeds.get(c)
        self.speeds[c] = (
            sample if current is None else current + self.smoothing * (sample - current)
        )
