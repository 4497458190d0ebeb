"""How many pending pods go into one solve: as many as the solver gets through in the target time.

A large arrival is cut into batches so the first shards bind while the next batch is solved.
Each solve's seconds per pending pod feed an exponentially weighted average, and the next batch
holds ``target_seconds`` worth of pods at that speed. A solve also has a fixed cost (the
snapshot, judging every running pod): on 5,000 nodes with 15,000 pods running it is most of a
small batch's time, and a per-pod average that ignores it shrinks every batch towards one shard,
each paying it again. Once recent solves of different sizes show a fixed cost (a line through
their (pods, seconds) with a positive intercept), the batch is what the target leaves after it,
and at least as many pods as make the per-pod part as long as the fixed one; when their cost
does not grow with their size at all, it is the largest batch that has gone well (``most``).

A solve that ran out of its time budget says how long the budget is, not how fast the solver
is, so it does not move the average (a solver that always uses its whole budget would otherwise
shrink every batch to one shard). What it says is how good an answer that batch size gets in
the budget. A good one (CP-SAT's own solution, within ``good_gap`` of its bound): the next
solve takes the whole budget too, whatever its size, so the next batch is at least as large. A
poor one (nothing of CP-SAT's own, or far from its bound): the batch was more than the solver
can handle in its budget, so batches are halved until it can, and grow back (doubling) once
solves end before their budget again.
"""

import statistics
from collections import deque
from dataclasses import dataclass, field

SOLVER_BOUND_STATUSES = frozenset({"OPTIMAL", "INFEASIBLE"})
"""Statuses that end a solve before its budget: proven, so the time is the solver's own."""


def relative_gap(objective: float, bound: float) -> float:
    """How far an answer may be from the best possible, as a share of the answer."""
    if objective <= bound:
        return 0.0
    return (objective - bound) / max(abs(objective), 1e-9)


@dataclass
class BatchSizer:
    target_seconds: float = 0.5
    max_pods: int = 600
    """The largest batch, whatever the speed (the binder's batches are small-batch solves)."""
    min_pods: int = 1
    smoothing: float = 0.5
    """Weight of the newest solve in the average."""
    good_gap: float = 0.05
    seconds_per_pod: float = 0.002
    """The estimate before the first solve: a batch of target/0.002 pods to start with."""
    solves: int = 0
    floor_pods: int = 1
    """Raised by good solves that used their whole budget: a batch costs it whatever its size."""
    ceiling_pods: int = 0
    """Lowered by poor solves that used their whole budget (0: ``max_pods``)."""
    samples: deque[tuple[int, float]] = field(default_factory=lambda: deque(maxlen=8))
    """Recent solves that ended within their budget: (pending pods, seconds)."""

    def __post_init__(self) -> None:
        if self.target_seconds <= 0:
            raise ValueError("target_seconds must be positive")
        if not 0 < self.smoothing <= 1:
            raise ValueError("smoothing must be in (0, 1]")
        if self.max_pods < self.min_pods or self.min_pods < 1:
            raise ValueError("need 1 <= min_pods <= max_pods")
        self.ceiling_pods = self.ceiling_pods or self.max_pods

    @property
    def pods(self) -> int:
        """Pending pods for the next batch (whole shards are added until it is reached)."""
        line = self.cost_line()
        if line is None:
            wanted = int(self.target_seconds / max(self.seconds_per_pod, 1e-6))
        else:
            fixed, per_pod = line
            if per_pod == 0:  # a larger batch costs no more: as large as has gone well
                return self.most
            wanted = int(max(self.target_seconds - fixed, fixed) / per_pod + 1e-9)
        wanted = max(wanted, self.floor_pods)
        return max(self.min_pods, min(self.max_pods, self.ceiling_pods, wanted))

    def predict(self, pods: int) -> float:
        """Seconds a solve of ``pods`` pending pods is expected to take, from the recent solves."""
        line = self.cost_line()
        if line is None:
            return pods * self.seconds_per_pod
        fixed, per_pod = line
        return fixed + per_pod * pods

    def cost_line(self) -> tuple[float, float] | None:
        """(fixed seconds, seconds per pod) fitted to the recent solves, when they show a fixed
        cost; (seconds, 0.0) when their cost does not grow with their size at all, or when
        every one of them took longer than the target.

        Least squares over solves of at least two sizes; None when there are not two sizes or
        the line has no fixed cost (then the average speed is used)."""
        sizes = [float(pods) for pods, _ in self.samples]
        times = [seconds for _, seconds in self.samples]
        if len(set(sizes)) < 2:
            return None
        fastest = min(times)
        if fastest >= self.target_seconds:
            # Even the smallest batch seen took longer than the target: a smaller one would
            # not meet it either (the fit between noisy times of similar sizes can miss that).
            return fastest, 0.0
        slope, fixed = statistics.linear_regression(sizes, times)
        if slope <= 0:
            return statistics.fmean(times), 0.0
        if fixed <= 0:
            return None
        return fixed, slope

    @property
    def most(self) -> int:
        """The batch for a backlog: as large as the solver has handled well in its budget.

        Not sized by the average speed: that comes from batches sized for the target time,
        and a solve's cost is rarely linear in its batch (a fixed cost per call, another path
        for large batches). A solve takes at most its budget, and a poor answer at the budget
        halves this, so a backlog costs at most a solve per budget, in few solves."""
        return max(self.min_pods, min(self.max_pods, self.ceiling_pods))

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
            if status == "FEASIBLE" and relative_gap(objective, bound) <= self.good_gap:
                self.floor_pods = min(self.max_pods, max(self.floor_pods, pods))
            else:
                self.ceiling_pods = max(self.min_pods, pods // 2)
                self.floor_pods = self.min_pods
            return
        self.floor_pods = self.min_pods
        self.ceiling_pods = min(self.max_pods, max(self.ceiling_pods, 2 * pods))
        self.samples.append((pods, seconds))
        sample = seconds / pods
        if self.solves == 0:
            self.seconds_per_pod = sample
        else:
            self.seconds_per_pod += self.smoothing * (sample - self.seconds_per_pod)
        self.solves += 1
