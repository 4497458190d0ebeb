"""How many pending pods go into one solve: as many as the solver gets through in the target time.

A large arrival is cut into batches so the first shards bind while the next batch is solved.
Each solve's seconds per pending pod feed an exponentially weighted average, and the next batch
holds ``target_seconds`` worth of pods at that speed. A solve that ran out of its time budget
says how long the budget is, not how fast the solver is: it does not move the average (a solver
that always uses its whole budget would otherwise shrink every batch to one shard), and since
the next solve will take the whole budget too, whatever its size, the next batch is made twice
as large instead (up to ``max_pods``), so the pods waiting get through in fewer budgets.
"""

from dataclasses import dataclass

SOLVER_BOUND_STATUSES = frozenset({"OPTIMAL", "INFEASIBLE"})
"""Statuses that end a solve before its budget: proven, so the time is the solver's own."""


@dataclass
class BatchSizer:
    target_seconds: float = 0.5
    max_pods: int = 600
    """The largest batch, whatever the speed (the binder's batches are small-batch solves)."""
    min_pods: int = 1
    smoothing: float = 0.5
    """Weight of the newest solve in the average."""
    seconds_per_pod: float = 0.002
    """The estimate before the first solve: a batch of target/0.002 pods to start with."""
    solves: int = 0
    floor_pods: int = 1
    """Raised by solves that ran out of budget: then a batch costs the budget whatever its size."""

    def __post_init__(self) -> None:
        if self.target_seconds <= 0:
            raise ValueError("target_seconds must be positive")
        if not 0 < self.smoothing <= 1:
            raise ValueError("smoothing must be in (0, 1]")
        if self.max_pods < self.min_pods or self.min_pods < 1:
            raise ValueError("need 1 <= min_pods <= max_pods")

    @property
    def pods(self) -> int:
        """Pending pods for the next batch (whole shards are added until it is reached)."""
        wanted = max(int(self.target_seconds / max(self.seconds_per_pod, 1e-6)), self.floor_pods)
        return max(self.min_pods, min(self.max_pods, wanted))

    def observe(self, pods: int, seconds: float, status: str, budget: float | None) -> None:
        """Learn from one solve of ``pods`` pending pods that took ``seconds``."""
        if pods <= 0 or seconds < 0:
            return
        out_of_budget = (
            budget is not None and status not in SOLVER_BOUND_STATUSES and seconds >= 0.9 * budget
        )
        if out_of_budget:
            self.floor_pods = min(self.max_pods, max(self.floor_pods, 2 * pods))
            return
        self.floor_pods = self.min_pods
        sample = seconds / pods
        if self.solves == 0:
            self.seconds_per_pod = sample
        else:
            self.seconds_per_pod += self.smoothing * (sample - self.seconds_per_pod)
        self.solves += 1
