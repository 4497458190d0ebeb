"""snapshot + policy -> plan. The one entry point the CLI, the binder and rebalance call.

Every call weighs candidate placements and returns the best by the order users judge a plan:
pending pods placed, then hard violations, then the evaluator's objective (solver/check.py).
The greedy baseline is always one of them, so a plan is never worse than greedy's.

* place mode: the levels (solver/levels/: zones, racks, nodes), started from greedy's placement,
  with any shard they could not finish completed by greedy; level one's optimum is the bound.
* rebalance mode: the current placement, the greedy repair (solver/repair.py: failovers first,
  then moves within the run's caps) and the node-class model (solver/classes/), started from
  the better of those two. With caps (``SolveOptions.caps``) each is ranked by what its changes
  leave once cut to the caps, which is what one run carries out.

``status`` is OPTIMAL only when the plan's objective equals a proven lower bound of the same
objective and no placement could place more pods; otherwise FEASIBLE with the true gap.
"""

import functools
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from models.cluster import Role
from models.plan import Engine, Mode, Plan, Status, Unplaced, Violation
from models.policy import Policy
from models.snapshot import Snapshot
from solver.changes import change_list, limit_changes, plan_after
from solver.check import Assessment, assess
from solver.classes.model import ClassOptions, solve_classes
from solver.classes.problem import DEFAULT_MAX_VARIABLES, build_problem, limit_candidates
from solver.collector import collector_paused
from solver.explain import unplaced_reasons
from solver.greedy import greedy_most_placed, greedy_placement
from solver.judging import RunningVerdict
from solver.levels.rooms import EligibilityCache
from solver.levels.shapes import Standing
from solver.levels.standing import StandingCache
from solver.levels.topdown import LevelsOptions, LevelsResult, place_by_levels
from solver.majority import keep_majorities
from solver.placement import Placement, to_plan
from solver.repair import Caps, repair
from solver.rules import RULES
from solver.search import SearchOptions, improve

Progress = Callable[[str, float | None, float | None], None]
"""Called with (phase, objective, bound) while solving; objective and bound are the plan's own
(the evaluator's terms), or None when a phase has none yet."""

DEFAULT_WORKERS = 1
"""CP-SAT workers when the policy says 0. One worker with a deterministic time budget gives the
same plan for the same input; the level models are small enough that a portfolio of workers
buys nothing measurable (docs/benchmarks.md), and on a loaded machine it costs."""


def default_workers() -> int:
    return DEFAULT_WORKERS


@dataclass
class SolveOptions:
    time_limit: float | None = None
    """Seconds for the whole call (policy solver.timeLimitSeconds by default)."""
    deadline: float | None = None
    """time.monotonic() by which the plan must be ready; wins over ``time_limit`` (the CLI
    counts from its own start, so reading the input is inside the budget)."""
    workers: int | None = None
    relative_gap: float | None = None
    seed: int | None = None
    progress: Progress | None = None
    hint: bool = True
    explain: bool = True
    search: bool = True
    """Spend what is left of the budget improving a plan that is not proven (solver/search.py).
    The binder turns it off: its next batch comes within a second, and a batch that searched
    its whole budget would hold every shard behind it."""
    caps: Caps | None = None
    """Rebalance: what one run may change (``--max-moves``, ``--max-failovers``); candidates are
    ranked by what their changes leave within these caps. None: the plan as a whole."""
    verdict: RunningVerdict | None = None
    """The checker's cached verdict on the running placement of this snapshot, kept by a caller
    that solves batch after batch (the binder): each candidate is then judged on what it changes."""
    standing: StandingCache | None = None
    """The running cluster's totals for the levels, kept the same way (solver/warm.py)."""
    eligibility: EligibilityCache | None = None
    """Which kinds each node accepts, kept the same way."""
    proof_first: float | None = None
    """Deterministic seconds level one seeks a proof before the gap may stop it (None: the
    levels' own ``PROOF_FIRST``). The binder asks for less: its batches are many and small,
    and the next one is its second chance."""
    explain_shards: frozenset[str] | None = None
    """Shards whose conflict with the others, should they be left out, is worth a model of its
    own (solver/explain.py); None: every shard. The binder names the shards it has not yet
    explained: a shard it retries every few seconds would otherwise pay for that model (up to
    two seconds, ahead of the batch's bindings) on every retry."""


@dataclass
class _Candidate:
    engine: Engine
    placement: Placement
    degraded: bool = False
    plan: Plan | None = None
    verdict: Assessment | None = None
    capped: Assessment | None = None
    """The verdict on what the plan's changes leave once cut to the run's caps, when they cut."""

    def rank(self) -> tuple[int, int, float]:
        assert self.plan is not None and self.verdict is not None
        verdict = self.capped or self.verdict
        hard = sum(_hard_weight(v) for v in verdict.violations if v.severity == "hard")
        return (len(self.plan.unplaced), hard, float(verdict.terms.get("total", 0.0)))


PILE_UPS = frozenset({"master-exclusivity", "shard-spread"})


def _hard_weight(violation: Violation) -> int:
    """How much of a hard violation there is. A pile-up on one node (masters there, or one
    shard's members on a host) counts each pod beyond the first: a plan that thins a pile of
    three masters to two ranks above one that leaves it, though both leave one violation. A
    run that may move only a little (the CronJob's caps) thins a pile one run at a time, and
    counted as one violation either way that progress lost the ranking to changing nothing."""
    if violation.rule in PILE_UPS:
        return max(1, len(violation.pods) - 1)
    return 1


@dataclass
class _Bounds:
    unplaced: int = 0
    """No placement leaves fewer of the solvable pending pods unplaced."""
    soft: float = 0.0
    """Lower bound of the objective when exactly ``unplaced`` of them stay unplaced."""
    solvable: set[str] = field(default_factory=set)
    """Pod keys the bound speaks of (pending members of shards that can be placed at all)."""
    known: bool = False


def solve(
    snapshot: Snapshot, policy: Policy, mode: Mode = "place", options: SolveOptions | None = None
) -> Plan:
    """Plan the snapshot under the policy within the time limit."""
    with collector_paused():  # tens of thousands of plan rows and checker records
        return _solve(snapshot, policy, mode, options or SolveOptions())


JUDGING_PER_ITEM = 35e-6
"""Seconds judging one candidate takes per member, pod and node (this 2-core machine, loaded)."""
GREEDY_PER_POD = 150e-6
"""Seconds greedy's placement takes per pending pod (the same machine, loaded)."""


def _judging_reserve(snapshot: Snapshot) -> float:
    """Seconds for judging two candidates (or one, at twice the pace), and a margin."""
    items = len(snapshot.members) + len(snapshot.other_pods) + len(snapshot.nodes)
    return 0.05 + 2 * JUDGING_PER_ITEM * items


def _finish_reserve(snapshot: Snapshot) -> float:
    """Seconds kept back, after the CP-SAT levels, for what must still run within the limit
    when their plan is not proven optimal: greedy's placement and judging two candidates."""
    return _judging_reserve(snapshot) + GREEDY_PER_POD * len(snapshot.pending)


GREEDY_FIRST_SHARE = 0.2
"""Greedy's plan, judged, comes before the levels once what follows the levels (greedy and
judging, ``_finish_reserve``) would take more than this share of the time left: then the levels
may not leave enough of it, and a plan never worse than greedy's must be ready on time."""


def _greedy_first(snapshot: Snapshot, left: float) -> bool:
    return _finish_reserve(snapshot) > GREEDY_FIRST_SHARE * left


LEVELS_FIRST_SHARE = 0.5
"""Past this share of the time left, greedy's plan and its judging first would leave the levels
too little to give CP-SAT's plan at all (15,000 nodes, 45,000 pods: 10-20 s of a 20 s limit,
loaded, and as much again to judge the levels' plan): the levels then come first, with only
their own judging kept back, and greedy places what they could not finish around their plan.
At 0.6, 15,000 nodes and 45,000 pods in a 20 s limit sat on the edge (an estimate of 11.1 s
against 0.6 of the 17.5-18.6 s left once the dump was read), and where greedy came first under
``survive: zone`` with 150 Redis clusters it took 10 s, the levels were skipped and greedy's
plan left 8,100 pods out, against 3 with the levels first: one run in four."""


def _levels_first(snapshot: Snapshot, left: float) -> bool:
    return _finish_reserve(snapshot) > LEVELS_FIRST_SHARE * left


@dataclass
class _Pace:
    """What greedy and judging one candidate took in this call, on this machine as loaded now
    (0 when greedy did not run first): the budget after them is planned from these, not from
    constants measured once."""

    greedy: float = 0.0
    judging: float = 0.0

    def margin(self) -> float:
        """Kept back at the end for what cannot be cut short (the plan's own figures)."""
        return 0.05 + 0.1 * self.judging

    def after_levels(self) -> float:
        """Seconds the levels leave: judging their plan, finishing a few shards they could not
        (greedy's own start-up is most of that), and the margin."""
        return 1.2 * self.judging + 0.3 * self.greedy + self.margin()

    def packing(self, snapshot: Snapshot) -> float:
        """The levels' estimate of their last level, packing members onto nodes: about half
        what greedy took for the same pods (the same heaps, fewer rules), or a constant per
        pending pod when greedy did not run first."""
        if self.greedy:
            return PACKING_SHARE * self.greedy
        return PACKING_PER_POD * len(snapshot.pending)

    def can_repair(self, snapshot: Snapshot, failed: set[str], deadline: float) -> bool:
        """Whether greedy can finish the shards the levels could not, and their plan still be
        judged, before the deadline (always, when greedy did not run first: the finish reserve
        is kept for that)."""
        if not self.greedy:
            return True
        pending = max(1, len(snapshot.pending))
        failing = sum(1 for m in snapshot.pending if m.shard_key in failed)
        repair = self.greedy * (0.3 + 0.7 * failing / pending) if failing else 0.0
        return time.monotonic() + repair + 1.2 * self.judging + self.margin() <= deadline

    def levels_floor(self) -> float:
        """The least time in which the levels can give a plan at all (preparing, the models'
        first answers and packing all pods, about what greedy took), or 0 when greedy did not
        run first: without it the levels are tried whatever is left."""
        return self.greedy

    def search_step(self) -> float:
        """A search step's cost beyond its CP-SAT time before one is measured: judging it,
        and building its model over the whole cluster (about as long)."""
        return 2.0 * self.judging

    def greedy_fits(self, snapshot: Snapshot, deadline: float) -> bool:
        """Whether greedy's whole plan, judged, still fits before the deadline after the
        levels: greedy's time per pending pod, scaled by how much slower than its constant
        judging ran here."""
        items = len(snapshot.members) + len(snapshot.other_pods) + len(snapshot.nodes)
        slower = max(1.0, self.judging / max(1e-9, JUDGING_PER_ITEM * items))
        greedy = GREEDY_PER_POD * len(snapshot.pending) * slower
        return time.monotonic() + greedy + 1.2 * self.judging + self.margin() <= deadline


PACKING_SHARE = 0.5
PACKING_PER_POD = 40e-6
"""Seconds the nodes level takes per pending pod (15,000 nodes / 45,000 pods: 1.3-1.5 s against
greedy's 3-5 s, loaded)."""


def _solve(snapshot: Snapshot, policy: Policy, mode: Mode, options: SolveOptions) -> Plan:
    start = time.monotonic()
    limit = options.time_limit or policy.solver.time_limit_seconds
    deadline = options.deadline if options.deadline is not None else start + limit
    work_until = max(start + 0.05, deadline - _finish_reserve(snapshot))
    workers = options.workers if options.workers is not None else policy.solver.workers
    workers = workers or default_workers()
    seed = options.seed if options.seed is not None else policy.solver.seed
    report = options.progress or (lambda *_: None)

    def judge(candidate: _Candidate) -> _Candidate:
        if mode == "place":
            # Whichever engine made it: a break of survive that what runs already has may stay
            # as it is, never grow (solver/majority.py).
            keep_majorities(snapshot, policy, candidate.placement)
        for other in candidates:
            if (
                other.verdict is not None
                and other.placement.node == candidate.placement.node
                and (other.placement.role == candidate.placement.role)
            ):
                candidate.plan, candidate.verdict = other.plan, other.verdict
                candidate.capped = other.capped
                return candidate
        placement = candidate.placement
        for m in snapshot.pending:
            if m.key not in placement.node:
                placement.unplaced.setdefault(m.key, "not placed")
        candidate.plan = to_plan(snapshot, placement, mode, "FEASIBLE")
        if options.verdict is not None:
            candidate.verdict = options.verdict.assess(snapshot, policy, candidate.plan)
        else:
            candidate.verdict = assess(snapshot, policy, candidate.plan)
        if mode == "rebalance" and options.caps is not None:
            caps = options.caps
            planned = change_list(candidate.plan, snapshot)
            kept = limit_changes(planned, caps.max_failovers, caps.max_moves)
            if len(kept) < len(planned):
                carried = plan_after(snapshot, candidate.plan, kept)
                candidate.capped = assess(snapshot, policy, carried)
        return candidate

    candidates: list[_Candidate] = []
    bounds = _Bounds()
    unplaceable: dict[str, str] = {}
    stay_reasons: dict[str, str] = {}
    bound_note: str | None = None
    repaired: _Candidate | None = None
    if mode == "place":
        fallback: _Candidate | None = None
        pace = _Pace()
        search_until = work_until - min(EXPLAIN_RESERVE, 0.1 * (deadline - start))
        left = deadline - time.monotonic()
        levels_first = _levels_first(snapshot, left)
        if levels_first:
            # Greedy's plan first would leave the levels no time: they come first, keeping
            # back only what judging their plan takes; greedy's whole plan is weighed after
            # them when what judging took here says it still fits.
            work_until = max(time.monotonic(), deadline - _judging_reserve(snapshot))
        elif _greedy_first(snapshot, left):
            # A large input: greedy's plan, judged, comes first, so that a plan never worse
            # than greedy's is ready on time whatever the levels manage in what is left; what
            # greedy and judging took, measured here as the machine is loaded now, plans the
            # rest of the budget.
            report("greedy", None, None)
            began = time.monotonic()
            placement = greedy_placement(snapshot, policy)
            pace.greedy = time.monotonic() - began
            fallback = judge(_Candidate("greedy", placement))
            pace.judging = time.monotonic() - began - pace.greedy
            work_until = max(time.monotonic(), deadline - pace.after_levels())
            search_until = deadline - pace.margin() - min(EXPLAIN_RESERVE, 0.1 * (deadline - start))
        levels: LevelsResult | None = None
        if time.monotonic() + pace.levels_floor() < work_until:
            report("levels", None, None)
            levels = place_by_levels(
                snapshot,
                policy,
                fallback.placement if fallback is not None else None,
                LevelsOptions(
                    work_until,
                    workers,
                    seed,
                    _level_progress(report),
                    standing=_standing(snapshot, options),
                    eligibility=options.eligibility,
                    relative_gap=_gap_limit(policy, options),
                    packing=pace.packing(snapshot),
                    proof_first=options.proof_first,
                    pack_until=float("inf") if levels_first else None,
                ),
            )
            unplaceable = levels.unplaceable
            bounds = _level_bounds(snapshot, levels)
        if (
            levels is not None
            and levels.placement.node
            and pace.can_repair(snapshot, levels.failed, deadline)
        ):
            began = time.monotonic()
            again = functools.partial(pace.can_repair, snapshot, levels.failed, deadline)
            first = judge(_Candidate("cp-sat", _repaired(snapshot, policy, levels, again)))
            candidates.append(first)
            if not pace.judging:
                pace.judging = time.monotonic() - began
            if levels_first:
                search_until = (
                    deadline - pace.margin() - min(EXPLAIN_RESERVE, 0.1 * (deadline - start))
                )
        if fallback is not None:
            candidates.append(fallback)
        if not candidates or not _proven(snapshot, candidates[0], bounds):
            # Not proven optimal: weigh it against greedy's, and what else the budget allows.
            # On a machine loaded past what the budget planned for, greedy's plan after the
            # levels would end past the deadline: then the levels' plan stands alone.
            # A plan placing all it can within the gap asked for of a proven bound is not weighed
            # against greedy's either: greedy's could be better by less than the gap (the
            # binder's batches, 1%: greedy and judging its plan took 0.13 s of the 0.87 s that
            # seven batches of 1,000 nodes solved in, in memory).
            within_gap = bool(candidates) and _settled(
                snapshot, candidates[0], bounds, _gap_limit(policy, options)
            )
            if (
                fallback is None
                and not within_gap
                and (not candidates or pace.greedy_fits(snapshot, deadline))
            ):
                report("greedy", None, None)
                placement = greedy_most_placed(
                    snapshot,
                    policy,
                    unplaceable=unplaceable,
                    again=functools.partial(pace.greedy_fits, snapshot, deadline),
                )
                candidates.append(judge(_Candidate("greedy", placement)))
            first = candidates[0]
            relaxed = _relaxable(policy)
            if levels_first:
                # Only what judging took here is kept back after the levels: a second round
                # must leave as much for its own plan's judging.
                work_until = min(work_until, deadline - 1.2 * pace.judging - pace.margin())
            if (
                relaxed
                and _leaves_pending(snapshot, first.placement, unplaceable)
                and time.monotonic() < work_until
            ):
                report("relaxing required separation", None, None)
                retry = place_by_levels(
                    snapshot,
                    policy,
                    first.placement,
                    LevelsOptions(
                        work_until,
                        workers,
                        seed,
                        _level_progress(report),
                        relaxed,
                        _standing(snapshot, options),
                        options.eligibility,
                        _gap_limit(policy, options),
                        packing=pace.packing(snapshot),
                        proof_first=options.proof_first,
                    ),
                )
                if pace.can_repair(snapshot, retry.failed, deadline):
                    again = functools.partial(pace.can_repair, snapshot, retry.failed, deadline)
                    degraded = _Candidate("cp-sat", _repaired(snapshot, policy, retry, again), True)
                    candidates.append(judge(degraded))
            best_so_far = min(candidates, key=_order)
            # Within the gap asked for of a proven bound, a better plan or a tighter bound is
            # what the gap says not to look for (the binder's batches: 0.3-0.7 s on 1,000 nodes).
            if not _settled(snapshot, best_so_far, bounds, _gap_limit(policy, options)):
                exact = _exact_classes(
                    snapshot, policy, best_so_far, work_until, workers, seed, options
                )
                if exact is not None:
                    candidate, class_bounds = exact
                    candidates.append(judge(candidate))
                    bounds = _tighter(bounds, class_bounds)
            best_so_far = min((c for c in candidates if not c.degraded), key=_order)
            if options.search and not _proven(snapshot, best_so_far, bounds):
                found = improve(
                    snapshot,
                    policy,
                    best_so_far.placement,
                    best_so_far,
                    SearchOptions(
                        search_until,
                        lambda p: judge(_Candidate("cp-sat", p)),
                        _order,
                        lambda c: _settled(snapshot, c, bounds, _gap_limit(policy, options)),
                        workers,
                        seed,
                        lambda phase: report(phase, None, None),
                        first_step=pace.search_step(),
                    ),
                )
                if found.best is not best_so_far:
                    candidates.append(found.best)
    else:
        report("greedy", None, None)
        baseline = _baseline(snapshot, policy, mode)
        judged_at = time.monotonic()
        candidates.append(judge(_Candidate("greedy", baseline)))
        # Judging one candidate, timed on this machine as loaded as it is now: what the class
        # model's candidate will cost to judge (twice, when the caps cut it) after its solve.
        judging = time.monotonic() - judged_at
        current = candidates[-1].verdict
        assert current is not None
        fixed = repair(
            snapshot,
            policy,
            options.caps or Caps(),
            work_until,
            lambda phase: report(phase, None, None),
        )
        stay_reasons = fixed.why
        if fixed.failovers or fixed.moves:
            report("judging the repair", None, None)
            repaired = judge(_Candidate("greedy", fixed.placement))
            candidates.append(repaired)
        if snapshot.pending and time.monotonic() < work_until:
            # The same repair around the pending pods as greedy placed them: fewer fixes when
            # they take the free nodes, but none paid for with a pod left pending.
            around = repair(snapshot, policy, options.caps or Caps(), work_until, pending=baseline)
            if around.failovers or around.moves:
                report("judging the repair", None, None)
                second = judge(_Candidate("greedy", around.placement))
                candidates.append(second)
                if repaired is None or _order(second) < _order(repaired):
                    repaired, stay_reasons = second, around.why
            elif repaired is not None and _order(candidates[0]) < _order(repaired):
                # The repair that keeps every pod placed changes nothing: its reasons are the
                # ones that hold (the other repair's fixes cost pending pods).
                stay_reasons = around.why
        report("node classes", None, None)
        at_fault = _at_fault(snapshot, current)
        start_from = min(candidates, key=_order).placement
        # With pending pods, explaining the ones left out builds a model of its own: as much again.
        after = judging * (2.5 + (2.0 if snapshot.pending else 0.0))
        classes_until = min(work_until, deadline - after - 0.05)
        classes = _rebalance(
            snapshot, policy, start_from, classes_until, workers, seed, options, at_fault
        )
        if classes is not None:
            candidate, bound, part = classes
            candidates.append(judge(candidate))
            if part is None:
                bounds = _Bounds(soft=bound, known=bound > 0)
            else:
                proved = f"bound {bound:g}" if bound > 0 else "no bound above 0"
                bound_note = (
                    f"partial re-solve: it changed only the {part}, with every other shard "
                    f"fixed as it runs, and proved {proved} for that part alone; nothing is "
                    "proven for the whole cluster (bound 0)"
                )

    report("judging", None, None)
    best = min(candidates, key=_order)
    if best.engine == "greedy" and any(
        c.engine == "cp-sat" and not c.degraded and c.verdict is best.verdict for c in candidates
    ):
        best.engine = "cp-sat"  # CP-SAT's own answer, which greedy happened to share
    assert best.plan is not None and best.verdict is not None
    if mode == "rebalance":
        stay_reasons = _stay_reasons(snapshot, best, repaired, stay_reasons)
    _mark_unplaced(snapshot, policy, mode, best, unplaceable, options, deadline, bounds)
    plan = best.plan.model_copy(
        update={
            "unplaced": [
                Unplaced(pod=k, reason=r) for k, r in sorted(best.placement.unplaced.items())
            ]
        }
    )
    objective = float(best.verdict.terms.get("total", 0.0))
    status, bound = _honest_status(snapshot, best, bounds, objective)
    terms = best.verdict.terms
    plan = plan.model_copy(
        update={
            "status": status,
            "engine": best.engine,
            "degraded": best.degraded,
            "broken_rules": _broken(policy, best) if best.degraded else [],
            "objective": objective,
            "bound": bound,
            "gap": (objective - bound) / objective if objective > 0 else 0.0,
            "unplaced_bound": bounds.unplaced if bounds.known else None,
            "solve_seconds": round(time.monotonic() - start, 4),
            "violations": best.verdict.violations,
            "worst_domain_loss": best.verdict.worst_domain_loss,
            "objective_terms": {k: float(v) for k, v in terms.items() if k != "total"},
            "explanation": best.placement.explanation,
            "bound_note": bound_note,
            "stay_reasons": stay_reasons,
            "warnings": [*plan.warnings, *_gap_warning(snapshot, best, bounds)],
        }
    )
    report("done", objective, bound)
    return plan


def _standing(snapshot: Snapshot, options: SolveOptions) -> Standing | None:
    return options.standing.standing(snapshot) if options.standing is not None else None


def _order(c: _Candidate) -> tuple[int, int, float, bool, bool]:
    """Placed pods, then hard violations, then the objective; ties go to CP-SAT's own plan."""
    return (*c.rank(), c.degraded, c.engine != "cp-sat")


def _proven(snapshot: Snapshot, candidate: _Candidate, bounds: _Bounds) -> bool:
    """The candidate meets the bounds: nothing can place more pods or cost less."""
    assert candidate.verdict is not None
    objective = float(candidate.verdict.terms.get("total", 0.0))
    return _honest_status(snapshot, candidate, bounds, objective)[0] == "OPTIMAL"


def _baseline(snapshot: Snapshot, policy: Policy, mode: Mode) -> Placement:
    """Greedy's placement: in rebalance mode the running members stay and greedy places the rest."""
    if mode == "place":
        return greedy_placement(snapshot, policy)
    current = Placement()
    for m in snapshot.members:
        if m.pod.node_name:
            current.node[m.key] = m.pod.node_name
            current.role[m.key] = m.role or Role.REPLICA
    if not snapshot.pending:
        return current  # nothing for greedy to place (its set-up alone: 0.8 s at 45,000 pods)
    return greedy_placement(snapshot, policy, start=current)


def _level_progress(report: Progress) -> Callable[[str, float, float], None]:
    """Level one's figures are the plan's own terms (a lower estimate of the final plan's,
    which the nodes level below then realises): they are shown as they improve."""

    def progress(phase: str, objective: float, bound: float) -> None:
        report(phase, objective if phase.startswith("level one") else None, bound)

    return progress


def _repaired(
    snapshot: Snapshot, policy: Policy, levels: LevelsResult, again: Callable[[], bool]
) -> Placement:
    """The levels' placement, with the shards a level could not finish placed by greedy."""
    if not levels.failed:
        return levels.placement
    return greedy_most_placed(
        snapshot,
        policy,
        start=levels.placement,
        shards=levels.failed,
        unplaceable=levels.unplaceable,
        again=again,
    )


def _relaxable(policy: Policy) -> frozenset[str]:
    if not policy.degradation.relax_when_infeasible:
        return frozenset()
    separation = policy.rules.replica_separation
    return frozenset(lvl for lvl in ("rack", "zone") if separation.strength(lvl) == "required")


def _leaves_pending(snapshot: Snapshot, placement: Placement, unplaceable: dict[str, str]) -> bool:
    return any(
        m.key not in placement.node
        for m in snapshot.pending
        if not m.pod.deleting and m.shard_key not in unplaceable
    )


def _level_bounds(snapshot: Snapshot, levels: LevelsResult) -> _Bounds:
    if levels.zone_status not in ("OPTIMAL", "FEASIBLE"):
        return _Bounds()
    solvable = {
        m.key
        for m in snapshot.pending
        if not m.pod.deleting and m.shard_key not in levels.unplaceable
    }
    # With a master majority already short somewhere, the soft bound only speaks of plans that
    # shorten it as far as level one did; say nothing rather than something too strong.
    soft = float(levels.soft_bound) if levels.shortfall == 0 else 0.0
    return _Bounds(levels.unplaced_bound, soft, solvable, True)


def _honest_status(
    snapshot: Snapshot, best: _Candidate, bounds: _Bounds, objective: float
) -> tuple[Status, float]:
    """OPTIMAL only when nothing more can be placed and the objective meets the proven bound."""
    if not bounds.known:
        return "FEASIBLE", 0.0
    bound = min(bounds.soft, objective)
    if bounds.solvable:
        unplaced = sum(1 for k in bounds.solvable if k not in best.placement.node)
        placed_all_possible = unplaced == bounds.unplaced
    else:
        placed_all_possible = not _pending_left(snapshot, best.placement)
    if placed_all_possible and bounds.soft >= objective and not best.degraded:
        return "OPTIMAL", objective
    return "FEASIBLE", bound


def _gap_limit(policy: Policy, options: SolveOptions) -> float:
    return options.relative_gap if options.relative_gap is not None else policy.solver.relative_gap


def _settled(snapshot: Snapshot, candidate: _Candidate, bounds: _Bounds, gap: float) -> bool:
    """Proven, or placing all it can within the relative gap asked for (solver.relativeGap)."""
    if _proven(snapshot, candidate, bounds):
        return True
    if not gap or not bounds.known or not bounds.solvable or candidate.degraded:
        return False
    assert candidate.verdict is not None
    objective = float(candidate.verdict.terms.get("total", 0.0))
    unplaced = sum(1 for k in bounds.solvable if k not in candidate.placement.node)
    return unplaced == bounds.unplaced and objective - bounds.soft <= gap * objective


def _gap_warning(snapshot: Snapshot, best: _Candidate, bounds: _Bounds) -> list[str]:
    """The pods between the plan's unplaced and its own proven bound, when there are any."""
    if not bounds.known or not bounds.solvable:
        return []
    left = sum(1 for k in bounds.solvable if k not in best.placement.node)
    gap = left - bounds.unplaced
    if gap <= 0:
        return []
    pending = len(snapshot.pending)
    return [
        f"not proven: {left} placeable pending pods left unplaced against a proven bound "
        f"(unplacedBound) of {bounds.unplaced}: a gap of {gap} pods, "
        f"{gap / pending:.1%} of the {pending} pending (a longer --time-limit may close it)"
    ]


def _pending_left(snapshot: Snapshot, placement: Placement) -> bool:
    return any(m.key not in placement.node for m in snapshot.pending if not m.pod.deleting)


EXPLAIN_RESERVE = 0.3
"""Seconds the search leaves, beyond the finish reserve, for explaining the pods left out
(solver/explain.py skips its conflict model when even that is too little)."""

SMALL_CLASS_MODEL = 5_000
"""Class-model size (decision variables) below which place mode also solves it: it is exact on
small clusters, where its proof of optimality takes a fraction of a second."""


def _exact_classes(
    snapshot: Snapshot,
    policy: Policy,
    start: _Candidate,
    until: float,
    workers: int,
    seed: int,
    options: SolveOptions,
) -> tuple[_Candidate, _Bounds] | None:
    """On a small cluster, the whole class model, started from the best placement so far."""
    if time.monotonic() + 0.1 >= until:
        return None
    if len({m.shard_key for m in snapshot.pending}) > SMALL_CLASS_MODEL:
        return None  # a variable per pending shard at least: not small, and costly to build
    problem = build_problem(snapshot, policy, "place", max_variables=None)
    size = sum(len(g.candidates) * len(g.roles) for g in problem.groups)
    if size > SMALL_CLASS_MODEL or not problem.groups:
        return None
    gap = _gap_limit(policy, options)
    solution = solve_classes(
        problem,
        ClassOptions(
            time_limit=until - time.monotonic(), workers=workers, seed=seed, relative_gap=gap
        ),
        start.placement if options.hint else None,
    )
    if solution.status not in ("OPTIMAL", "FEASIBLE"):
        return None
    bounds = _Bounds()
    if solution.valid:
        solvable = {m.key for g in problem.groups for m in g.members}
        bounds = _Bounds(solution.unplaced_bound, float(solution.bound), solvable, True)
    return _Candidate("cp-sat", solution.placement), bounds


def _tighter(a: _Bounds, b: _Bounds) -> _Bounds:
    """The stronger of two valid bounds (lexicographically: unplaced pods, then the objective)."""
    if not b.known:
        return a
    if not a.known:
        return b
    if b.unplaced != a.unplaced:
        return b if b.unplaced > a.unplaced else a
    return b if b.soft > a.soft else a


REBALANCE_WHOLE = 60_000
"""Class-model size (decision variables) above which rebalance moves only the shards at fault."""
REBALANCE_AT_FAULT = 40
REBALANCE_AT_FAULT_VARIABLES = 8_000
"""Decision variables the shards at fault keep (the roomiest classes of each rack, and where
they run): small enough for CP-SAT to improve on the current placement within seconds."""
"""Most shards one rebalance on a large cluster re-solves, the worst first: a run applies a
few changes (--max-moves), and the next run takes the next ones."""


def _at_fault(snapshot: Snapshot, verdict: Assessment) -> set[str]:
    """Shards named by the violations of the current placement: hard ones first, then soft."""
    shard_of = {m.key: m.shard_key for m in snapshot.members}
    ordered: list[str] = []
    for severity in ("hard", "soft"):
        for v in verdict.violations:
            if v.severity == severity:
                ordered.extend(shard_of[p] for p in v.pods if p in shard_of)
    return set(list(dict.fromkeys(ordered))[:REBALANCE_AT_FAULT])


def _rebalance(
    snapshot: Snapshot,
    policy: Policy,
    baseline: Placement,
    until: float,
    workers: int,
    seed: int,
    options: SolveOptions,
    at_fault: set[str],
) -> tuple[_Candidate, float, str | None] | None:
    """The class model, started from ``baseline`` (the best placement so far).

    On a large cluster only the shards the audit finds at fault move (hard violations first):
    the whole cluster's model would not even be built within the budget. Its bound then speaks
    of that part only: the third item names that part (None when the bound is the whole's).
    """
    if until - time.monotonic() <= 0.1:
        return None  # building the model alone takes seconds on a large cluster
    problem = build_problem(snapshot, policy, "rebalance", max_variables=None)
    size = sum(len(g.candidates) * len(g.roles) for g in problem.groups)
    if size > REBALANCE_WHOLE and at_fault:
        problem = build_problem(
            snapshot, policy, "rebalance", max_variables=None, movable_shards=at_fault
        )
    keep: dict[int, set[int]] = {}
    for g in problem.groups:
        for m in g.members:
            node = baseline.node.get(m.key)
            c = problem.node_class.get(node) if node else None
            if c is not None:
                keep.setdefault(g.index, set()).add(c)
    restricted = size > REBALANCE_WHOLE and bool(at_fault)
    problem = limit_candidates(
        problem, REBALANCE_AT_FAULT_VARIABLES if restricted else DEFAULT_MAX_VARIABLES, keep=keep
    )
    remaining = until - time.monotonic()
    if remaining <= 0.1:
        return None
    gap = _gap_limit(policy, options)
    solution = solve_classes(
        problem,
        ClassOptions(time_limit=remaining, workers=workers, seed=seed, relative_gap=gap),
        baseline if options.hint else None,
    )
    if solution.status not in ("OPTIMAL", "FEASIBLE"):
        return None
    placement = solution.placement
    for m in snapshot.members:
        if m.pod.node_name and m.key not in placement.node and m.key not in placement.unplaced:
            placement.node[m.key] = m.pod.node_name
            placement.role[m.key] = m.role or Role.REPLICA
    part = None
    if restricted:
        shards = len(snapshot.shards)
        part = f"{len(at_fault)} shards at fault (of {shards})"
    return _Candidate("cp-sat", placement), float(solution.bound), part


def _hard_shards(snapshot: Snapshot, candidate: _Candidate) -> set[str]:
    """Shards named by the hard violations the candidate leaves (within the run's caps)."""
    verdict = candidate.capped or candidate.verdict
    assert verdict is not None
    shard_of = {m.key: m.shard_key for m in snapshot.members}
    return {
        shard_of[p]
        for v in verdict.violations
        if v.severity == "hard"
        for p in v.pods
        if p in shard_of
    }


def _stay_reasons(
    snapshot: Snapshot,
    best: _Candidate,
    repaired: _Candidate | None,
    found: dict[str, str],
) -> dict[str, str]:
    """Why each shard of a hard violation the chosen plan leaves stays: the repair's reason,
    or, where the repair removed it but lost the ranking, the pods its fix leaves unplaced."""
    left = _hard_shards(snapshot, best)
    out = {s: r for s, r in found.items() if s in left}
    if repaired is not None and repaired is not best and repaired.plan and best.plan:
        extra = len(repaired.plan.unplaced) - len(best.plan.unplaced)
        for shard in left - _hard_shards(snapshot, repaired) - set(out):
            out[shard] = (
                f"no room: the failovers and moves that remove it take nodes that pending pods "
                f"need ({extra} more would stay unplaced), and placing pending pods comes first"
                if extra > 0
                else "the ranking: the repair that removes it costs more elsewhere"
            )
    return out


def _broken(policy: Policy, best: _Candidate) -> list[str]:
    assert best.verdict is not None
    return [
        f"replica-separation:{lvl}"
        for lvl in ("rack", "zone")
        if policy.rules.replica_separation.strength(lvl) == "required"
        and any(
            v.rule == "replica-separation" and f" {lvl} " in v.message
            for v in best.verdict.violations
        )
    ]


def _mark_unplaced(
    snapshot: Snapshot,
    policy: Policy,
    mode: Mode,
    best: _Candidate,
    unplaceable: dict[str, str],
    options: SolveOptions,
    deadline: float,
    bounds: _Bounds,
) -> None:
    """Give every pending member the plan leaves out a reason, in words, per shard."""
    placement = best.placement
    missing = [m for m in snapshot.pending if m.key not in placement.node]
    proven_most = None
    if bounds.known and bounds.solvable:
        left_out = sum(1 for k in bounds.solvable if k not in placement.node)
        if left_out == bounds.unplaced:
            proven_most = sum(1 for m in snapshot.pending if m.key in placement.node)
    reasons, explanation = unplaced_reasons(
        snapshot,
        policy,
        missing,
        unplaceable,
        [r.encode for r in RULES],
        deadline if options.explain else None,
        proven_most,
        options.explain_shards,
        masters_stay=mode == "place",
    )
    placement.unplaced = reasons
    placement.explanation = explanation
