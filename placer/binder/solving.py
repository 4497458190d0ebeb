"""Solving: one batch of ready shards through the solver, and its plan read as placements.

The running pods stay fixed; the pending members of shards outside the batch are left out, and
room is kept for the members ordered shards will have later. The solver's measured speed sizes
the next batch (``placer.binder.batching``); the running placement's verdict stays warm from
batch to batch (``solver.warm``). Nothing here writes to the cluster.
"""

import functools
import itertools
import logging
import time
from collections import defaultdict
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from models.identity.expected import expected_members
from models.plan import Plan, Violation
from models.policy import Policy
from models.snapshot import Snapshot
from placer.binder.background import LaterText
from placer.binder.batching import BatchSizer
from placer.binder.cache import PodKey
from placer.binder.config import BinderConfig
from placer.binder.enforce import Placement
from placer.binder.holding import EXPLAIN_AGAIN, StepReport
from placer.binder.reporting import plan_summary, survival_summary
from placer.metrics import Metrics
from solver.explain import left_out_for_room
from solver.greedy import greedy_plan
from solver.solve import SolveOptions, solve
from solver.survival import verdicts_for
from solver.warm import Warm

log = logging.getLogger("placer.binder.loop")
"""Every part of the binder logs as the binder: operators filter on one logger name."""


@dataclass(frozen=True)
class Solved:
    """A batch's plan, the snapshot it was solved on, its name and how long it took."""

    plan: Plan
    batch: Snapshot
    batch_id: str
    seconds: float
    explained: frozenset[str] | None = None
    """The shards whose conflict the solve would explain if left out (None: all of them)."""


@dataclass(frozen=True)
class Unplaced:
    key: PodKey
    pod: str
    reason: str
    shard: str | None
    """The shard of the batch it belongs to, if the batch's snapshot knows it."""


class Solving:
    """Solves batches; counts them (``<run_id>-<n>``) and feeds the batch sizer."""

    def __init__(
        self,
        policy: Policy,
        config: BinderConfig,
        metrics: Metrics,
        sizer: BatchSizer,
        warm: Warm,
        run_id: str,
        to_explain: Callable[[Iterable[str]], frozenset[str]] | None = None,
    ) -> None:
        self.policy = policy
        self.to_explain = to_explain
        """Of a batch's shards, those whose conflict is worth explaining if they are left out
        (``Holding.to_explain``); None: all of them."""
        self.config = config
        self.metrics = metrics
        self.sizer = sizer
        self.warm = warm
        self.run_id = run_id
        self.batches = itertools.count(1)

    def budget(self) -> float | None:
        if self.config.solver == "greedy":
            return None
        return self.config.time_limit or self.policy.solver.time_limit_seconds

    def solve(self, snapshot: Snapshot) -> Plan:
        if self.config.solver == "greedy":
            return greedy_plan(snapshot, self.policy)
        # The running placement's verdict and totals stay warm from batch to batch; what the
        # watch changed since the last batch (by the parse cache's object identity) is redone.
        self.warm.prepare(snapshot, self.policy)
        options = SolveOptions(
            time_limit=self.config.time_limit,
            relative_gap=self.config.relative_gap,
            verdict=self.warm.verdict,
            standing=self.warm.standing,
            eligibility=self.warm.eligibility,
            search=False,  # latency: the next batch is the binder's second chance
            proof_first=self.config.proof_first,
            explain_shards=self._to_explain(snapshot),
        )
        return solve(snapshot, self.policy, "place", options)

    def _to_explain(self, snapshot: Snapshot) -> frozenset[str] | None:
        if self.to_explain is None:
            return None
        return self.to_explain({m.shard_key for m in snapshot.pending})

    def solve_batch(
        self,
        snapshot: Snapshot,
        shards: list[str],
        report: StepReport,
        solver: Callable[[Snapshot], Plan],
        reads: tuple[int, float, float, int],
    ) -> Solved:
        """Solve ``shards`` with ``solver``, count the solve and log it (with ``reads``: how
        many snapshots were built so far, in how long, of which this thread's CPU, and how
        many of them whole rather than from the last)."""
        ready = set(shards)
        members = [m for m in snapshot.members if not m.pod.pending or m.shard_key in ready]
        # Room for the members ordered shards will have later (never enforced: no pod).
        batch = snapshot.model_copy(update={"members": (*members, *expected_members(snapshot))})
        batch_id = f"{self.run_id}-{next(self.batches)}"
        solved_pods = sum(1 for m in members if m.pod.pending)
        started, cpu = time.monotonic(), time.thread_time()
        plan = solver(batch)
        seconds, cpu = time.monotonic() - started, time.thread_time() - cpu
        self.sizer.observe(
            solved_pods, seconds, plan.status, self.budget(), plan.objective, plan.bound
        )
        self.metrics.observe_solve("place", plan.status, seconds)
        report.solved_pods, report.solve_status, report.batch = solved_pods, plan.status, batch_id
        if plan.violations:
            counts: dict[tuple[str, str], int] = defaultdict(int)
            for v in plan.violations:
                counts[(v.rule, v.severity)] += 1
            self.metrics.set_violations(counts)
        elif self.config.solver == "cp-sat":
            self.metrics.set_violations({})
        self.metrics.set_worst_domain_loss(
            {d.level: d.master_loss_ratio for d in plan.worst_domain_loss}
        )
        log.info(
            "solve batch=%s pods=%d shards=%d status=%s seconds=%.3f objective=%g bound=%g "
            "next_batch_pods=%d cpu=%.3f snapshots=%d (%.2fs, cpu %.2fs, %d whole) soft=%d",
            batch_id,
            solved_pods,
            len(shards),
            plan.status,
            seconds,
            plan.objective,
            plan.bound,
            self.sizer.pods,
            cpu,
            *reads,
            sum(1 for v in plan.violations if v.severity == "soft"),
        )
        own = batch_violations(plan, {m.key for m in members if m.pod.pending})
        if own:
            log.warning(
                "plan batch=%s leaves %d violation(s) on its own pods: %s",
                batch_id,
                len(own),
                "; ".join(f"{v.severity} {v.rule}: {v.message}" for v in own),
            )
        return Solved(plan, batch, batch_id, seconds, self._to_explain(batch))

    def summary(self, solved: Solved) -> LaterText:
        """What each Scheduled event of the batch says about the batch, made when the first
        is sent: the survival verdict it reads is off the path to the batch's first write."""
        return LaterText(functools.partial(self._summary, solved))

    def _summary(self, solved: Solved) -> str:
        clusters = {m.cluster for m in solved.batch.members if m.pod.pending}
        judged = self.config.solver == "cp-sat"  # its plan carries the checker's verdict
        survival = verdicts_for(solved.batch, self.policy, solved.plan, clusters, judged)
        if self.config.solver == "cp-sat":
            return f"{plan_summary(solved.plan, solved.seconds)}; {survival_summary(survival)}"
        return (
            f"batch placed by the greedy baseline in {solved.seconds:.2f}s; "
            f"{survival_summary(survival)}"
        )


def batch_violations(plan: Plan, placed: Collection[str]) -> list[Violation]:
    """The plan's violations that name a pod the batch places (``placed``: their keys): what
    this decision accepted, as opposed to what the running pods already break."""
    return [v for v in plan.violations if any(pod in placed for pod in v.pods)]


def placements(
    plan: Plan,
    ours: Mapping[PodKey, str],
    raw: Mapping[PodKey, dict[str, Any]],
    shards: list[str],
) -> list[tuple[str, tuple[Placement, ...]]]:
    """The plan's placements of our pods by shard: the batch's order, then by name; within a
    shard by pod name, one order for every binder (see ``Writer.enforce_shard``)."""
    by_key = {f"{k[0]}/{k[1]}": k for k in ours}
    placed_by_shard: dict[str, list[Placement]] = defaultdict(list)
    for a in plan.assignments:
        key = by_key.get(a.pod)
        if a.action == "place" and a.node and key is not None:
            placed_by_shard[f"{a.cluster}/{a.shard}"].append(
                Placement(key, raw[key], a.node, a.role)
            )
    order = {shard: i for i, shard in enumerate(shards)}
    return [
        (shard, tuple(sorted(placed_by_shard[shard], key=lambda p: p.key)))
        for shard in sorted(placed_by_shard, key=lambda s: (order.get(s, len(order)), s))
    ]


SAID_BEFORE = (
    "which rules conflict was said when the shard was first left out, and is said again "
    f"every {EXPLAIN_AGAIN}th time"
)


def unplaced(solved: Solved, ours: Mapping[PodKey, str]) -> list[Unplaced]:
    """Our pods the plan left unplaced, each with the plan's reason and what its explanation
    adds to it; a shard left out again, not explained again, says where that was said."""
    by_key = {f"{k[0]}/{k[1]}": k for k in ours}
    batch_members = {m.key: m for m in solved.batch.members}
    found: list[Unplaced] = []
    for u in solved.plan.unplaced:
        key = by_key.get(u.pod)
        if key is None:
            continue
        member = batch_members.get(u.pod)
        shard = member.shard_key if member is not None else None
        more = [line for line in solved.plan.explanation if line not in u.reason]
        if (
            solved.explained is not None
            and shard not in solved.explained
            and left_out_for_room(u.reason)
        ):
            more.append(SAID_BEFORE)
        reason = u.reason + (f" ({'; '.join(more)})" if more else "")
        found.append(Unplaced(key, u.pod, reason, shard))
    return found
