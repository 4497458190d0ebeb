"""snapshot + policy -> plan. The one entry point the CLI, the binder and rebalance call."""

import gc
import os
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace

from ortools.sat.python import cp_model

from models.cluster import Role
from models.plan import Mode, Plan, Status
from models.policy import LEVELS, Policy
from models.snapshot import Snapshot
from solver.assign import assign_nodes
from solver.check import assess
from solver.cpmodel import RELAXED_WEIGHT, PlacementModel, build_variables
from solver.explain import explain_conflict, filter_summary
from solver.greedy import greedy_placement
from solver.placement import Placement, to_plan
from solver.problem import Problem, build_problem, limit_candidates, narrow_for_batch
from solver.rules import RULES

Progress = Callable[[float, float, float], None]
"""Called with (objective, bound, elapsed seconds) as better solutions are found."""

LARGE_MODEL = 20_000
_STATUS: dict[int, Status] = {
    cp_model.OPTIMAL: "OPTIMAL",
    cp_model.FEASIBLE: "FEASIBLE",
    cp_model.INFEASIBLE: "INFEASIBLE",
    cp_model.UNKNOWN: "UNKNOWN",
    cp_model.MODEL_INVALID: "MODEL_INVALID",
}


@dataclass
class SolveOptions:
    time_limit: float | None = None
    workers: int | None = None
    relative_gap: float | None = None
    progress: Progress | None = None
    hint: bool = True
    explain: bool = True
    narrow: bool = True
    """Small batches in place mode first solve a model narrowed to the most promising node
    classes (solver/problem.py narrow_for_batch), and re-solve unnarrowed only when that leaves
    pods unplaced. False always solves the full model."""


class _Progress(cp_model.CpSolverSolutionCallback):
    def __init__(self, report: Progress, big: int, start: float) -> None:
        super().__init__()
        self.report, self.big, self.start = report, big, start

    def on_solution_callback(self) -> None:
        self.report(self.objective_value, self.best_objective_bound, time.monotonic() - self.start)


@dataclass
class _Solved:
    status: Status
    placement: Placement
    cp_objective: float
    cp_bound: float
    unplaced_count: int
    big: int
    pruned: bool = False
    """Solved on a model with limited candidates: its bound is not the full problem's."""


MIN_DEFAULT_WORKERS = 4
"""CP-SAT's portfolio (search, LNS, feasibility jump) needs a few workers to work as one: on a
2-core machine 4 workers prove the narrowed 100-shard model optimal in 0.9 s where 2 take 1.7 s
(docs/benchmarks.md)."""


def default_workers() -> int:
    """Workers when the policy says 0: one per core, and never fewer than four."""
    return max(MIN_DEFAULT_WORKERS, os.cpu_count() or 1)


def _objective(pm: PlacementModel) -> int:
    """Unplaced pods cost more than every other term together: placing comes first."""
    upper = sum(pm.constants.values()) + 1
    problem = pm.problem
    members = sum(g.size for g in problem.groups) + len(problem.fixed_members)
    w = problem.policy.weights
    upper += (w.rack + w.zone + 3 * w.master_balance + w.move + w.failover) * (
        members + 1
    ) + w.load_balance * 10_001
    upper += RELAXED_WEIGHT * 2 * (members + 1) if pm.strengths_override else 0
    big = upper
    terms = [big * t for t in pm.unplaced_terms]
    for items in pm.costs.values():
        terms.extend(weight * expr for weight, expr in items)
    pm.model.minimize(sum(terms, 0) + sum(pm.constants.values()))
    return big


def _hint(pm: PlacementModel, placement: Placement) -> None:
    problem = pm.problem
    counts: dict[tuple[int, int, Role], int] = defaultdict(int)
    member_group = {m.key: g.index for g in problem.groups for m in g.members}
    for key, node in placement.node.items():
        g = member_group.get(key)
        c = problem.node_class.get(node)
        if g is None or c is None:
            continue
        counts[(g, c, placement.role[key])] += 1
    for key, var in pm.n.items():
        pm.model.add_hint(var, counts.get(key, 0))
    for shard_key, var in pm.placed.items():
        members = problem.snapshot.shards[shard_key]
        placed = all(m.key in placement.node for m in members if m.pod.pending)
        pm.model.add_hint(var, int(placed))


def _complete_hint(model: cp_model.CpModel, time_limit: float) -> None:
    """Extend a hint on the decision variables to every variable, so CP-SAT starts from it.

    CP-SAT only adopts a hint it can complete; the penalty and helper variables are easy to fill
    in once the decisions are fixed, which takes a fraction of a second.
    """
    proto = model.proto
    if not len(proto.solution_hint.vars):
        return
    probe = model.clone()
    for index, value in zip(proto.solution_hint.vars, proto.solution_hint.values, strict=True):
        probe.add(probe.get_int_var_from_proto_index(index) == value)
    probe.clear_hints()
    solver = cp_model.CpSolver()
    solver.parameters.max_time_in_seconds = time_limit
    solver.parameters.stop_after_first_solution = True
    if solver.solve(probe) not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        return
    model.clear_hints()
    for index in range(len(proto.variables)):
        var = model.get_int_var_from_proto_index(index)
        model.add_hint(var, solver.value(var))


def _current_placement(problem: Problem) -> Placement:
    placement = Placement()
    for g in problem.groups:
        for m in g.members:
            if m.pod.node_name:
                placement.node[m.key] = m.pod.node_name
                placement.role[m.key] = m.role or Role.REPLICA
    return placement


def _seed_placement(problem: Problem) -> Placement:
    """The placement CP-SAT starts from, and the answer when it finds none in time."""
    if problem.mode == "place":
        return greedy_placement(problem.snapshot, problem.policy)
    return _current_placement(problem)


def _solve_once(
    problem: Problem, options: SolveOptions, strengths: dict[str, str], seed: Placement | None
) -> _Solved:
    start = time.monotonic()
    pm = PlacementModel(problem, strengths_override=strengths)
    build_variables(pm)
    for rule in RULES:
        rule.encode(pm)
    big = _objective(pm)
    if seed is not None:
        _hint(pm, seed)
        _complete_hint(
            pm.model,
            max(0.5, 0.2 * (options.time_limit or problem.policy.solver.time_limit_seconds)),
        )
    solver = cp_model.CpSolver()
    params = solver.parameters
    policy = problem.policy.solver
    params.max_time_in_seconds = max(
        0.05, (options.time_limit or policy.time_limit_seconds) - (time.monotonic() - start)
    )
    workers = options.workers if options.workers is not None else policy.workers
    params.num_workers = workers or default_workers()
    gap = options.relative_gap if options.relative_gap is not None else policy.relative_gap
    if gap:
        params.relative_gap_limit = gap
    if len(pm.n) > LARGE_MODEL:
        # Presolve would eat the whole budget on large models; search does better with the time.
        params.symmetry_level = 0
        params.cp_model_probing_level = 0
        params.max_presolve_iterations = 1
        params.find_big_linear_overlap = False
    callback = _Progress(options.progress, big, start) if options.progress else None
    code = solver.solve(pm.model, callback)
    status = _STATUS.get(code, "UNKNOWN")
    if code not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        return _Solved(status, Placement(), 0.0, 0.0, 0, big)
    counts = {key: int(solver.value(v)) for key, v in pm.n.items()}
    placement = assign_nodes(problem, {k: v for k, v in counts.items() if v})
    unplaced = round(sum(solver.value(t) for t in pm.unplaced_terms)) if pm.unplaced_terms else 0
    return _Solved(
        status,
        placement,
        solver.objective_value,
        solver.best_objective_bound,
        unplaced,
        big,
        problem.pruned,
    )


def _seed_classes(problem: Problem, seed: Placement) -> dict[int, set[int]]:
    """Per group: the node classes the seed placement put its members in."""
    out: dict[int, set[int]] = defaultdict(set)
    for g in problem.groups:
        for m in g.members:
            node = seed.node.get(m.key)
            c = problem.node_class.get(node) if node is not None else None
            if c is not None:
                out[g.index].add(c)
    return out


def _solve_narrowed(
    problem: Problem, options: SolveOptions, seed: Placement | None
) -> tuple[_Solved | None, bool]:
    """The small-batch fast path: solve on the best few classes per group.

    Returns (solution or None, whether a narrowed model was tried). None when narrowing does not
    apply or when the narrowed model did not place every pending pod (infeasible, out of time,
    or a shard left out): the full model must then decide, so narrowing never turns a
    placeable batch into an unplaced one.
    """
    if not options.narrow:
        return None, False
    narrowed = narrow_for_batch(
        problem,
        _seed_classes(problem, seed) if seed is not None else {},
        problem.policy.rules.max_masters_per_node,
    )
    if narrowed is None:
        return None, False
    solved = _solve_once(narrowed, options, {}, seed)
    if solved.status == "UNKNOWN" and seed is not None and _places_all(problem, seed):
        # Out of time on the small model: the full one would not do better in less. The seed
        # places everything, so it stands (as it would after any solve that finds nothing).
        return solved, True
    if (
        solved.status not in ("OPTIMAL", "FEASIBLE")
        or solved.unplaced_count
        or solved.placement.unplaced
    ):
        return None, True
    return solved, True


def _places_all(problem: Problem, placement: Placement) -> bool:
    return all(m.key in placement.node for g in problem.groups for m in g.members)


@contextmanager
def _collector_paused() -> Iterator[None]:
    """Pause Python's cyclic garbage collector for the duration of one solve.

    A solve over a large cluster allocates tens of thousands of short-lived objects (plan rows,
    checker records), which triggers full collections that each walk the whole snapshot: about a
    quarter of a small batch's wall time in benchmarks. Reference counting still frees nearly
    everything; the collector resumes (and catches up) when the solve returns.
    """
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def solve(
    snapshot: Snapshot, policy: Policy, mode: Mode = "place", options: SolveOptions | None = None
) -> Plan:
    """Plan the snapshot under the policy: build, solve (narrowed first for small batches), judge."""
    with _collector_paused():
        return _solve(snapshot, policy, mode, options)


def _solve(snapshot: Snapshot, policy: Policy, mode: Mode, options: SolveOptions | None) -> Plan:
    options = options or SolveOptions()
    start = time.monotonic()
    # Candidates are limited for the full model only: a batch that narrows never needs it.
    problem = build_problem(snapshot, policy, mode, max_variables=None)
    seed = _seed_placement(problem) if options.hint else None
    solved, attempted = _solve_narrowed(problem, options, seed)
    if solved is None:
        problem = limit_candidates(problem)
        if attempted:
            # The narrowed attempt fell short: the full model gets what is left of the budget.
            limit = options.time_limit or policy.solver.time_limit_seconds
            remaining = max(1.0, limit - (time.monotonic() - start))
            options = replace(options, time_limit=remaining)
        solved = _solve_once(problem, options, {}, seed)
    degraded = False
    broken: list[str] = []
    required = [
        lvl
        for lvl in LEVELS
        if lvl != "host" and policy.rules.replica_separation.strength(lvl) == "required"
    ]
    if (
        solved.status in ("OPTIMAL", "FEASIBLE")
        and solved.unplaced_count
        and policy.degradation.relax_when_infeasible
        and required
    ):
        relaxed = _solve_once(problem, options, dict.fromkeys(required, "preferred"), seed)
        if (
            relaxed.status in ("OPTIMAL", "FEASIBLE")
            and relaxed.unplaced_count < solved.unplaced_count
        ):
            solved, degraded = relaxed, True

    placement = solved.placement
    if solved.status not in ("OPTIMAL", "FEASIBLE"):
        # No solution in time: fall back to the greedy baseline rather than place nothing.
        placement = seed if seed is not None else _seed_placement(problem)
    _mark_unplaced(problem, placement, options, solved)
    for member, reason in problem.skipped:
        placement.unplaced.setdefault(member.key, reason)
    status = solved.status
    plan = to_plan(snapshot, placement, mode, status)
    # A narrowed model's bound says nothing about the full one; in place mode what the running
    # members cost alone is a valid bound, and the plan is proven optimal only when it meets it.
    running_bound = solved.pruned and mode == "place"
    verdict = assess(snapshot, policy, plan, running_total=running_bound)
    terms = verdict.terms
    objective = float(terms.get("total", 0.0))
    bound = (
        max(0.0, solved.cp_bound - solved.big * solved.unplaced_count)
        if solved.status in ("OPTIMAL", "FEASIBLE")
        else 0.0
    )
    bound = min(bound, objective)
    if solved.status == "OPTIMAL" and not degraded:
        bound = (
            objective
            if solved.cp_objective - solved.big * solved.unplaced_count >= objective
            else bound
        )
    if running_bound and verdict.running_total is not None and status in ("OPTIMAL", "FEASIBLE"):
        bound = min(verdict.running_total, objective)
        status = "OPTIMAL" if bound >= objective and not degraded else "FEASIBLE"
    violations = verdict.violations
    if degraded:
        broken = [
            f"replica-separation:{lvl}"
            for lvl in required
            if any(v.rule == "replica-separation" and f" {lvl} " in v.message for v in violations)
        ]
    plan = plan.model_copy(
        update={
            "status": status,
            "degraded": degraded,
            "broken_rules": broken,
            "objective": objective,
            "bound": bound,
            "gap": (objective - bound) / objective if objective > 0 else 0.0,
            "solve_seconds": round(time.monotonic() - start, 4),
            "violations": violations,
            "worst_domain_loss": verdict.worst_domain_loss,
            "objective_terms": {k: float(v) for k, v in terms.items() if k != "total"},
        }
    )
    return plan


def _mark_unplaced(
    problem: Problem, placement: Placement, options: SolveOptions, solved: _Solved
) -> None:
    """Give every pending member the solver left out a reason, in words."""
    missing = [
        m
        for g in problem.groups
        for m in g.members
        if m.key not in placement.node and m.key not in placement.unplaced
    ]
    if not missing:
        return
    reasons: dict[str, str] = {}
    conflict_shards: list[str] = []
    group_of = {m.key: g for g in problem.groups for m in g.members}
    for member in missing:
        group = group_of[member.key]
        if not group.candidates:
            reasons[member.shard_key] = (
                reasons.get(member.shard_key) or f"{member.key}: {filter_summary(problem, member)}"
            )
        elif member.shard_key not in reasons and member.shard_key not in conflict_shards:
            conflict_shards.append(member.shard_key)
    explanation: list[str] = []
    if conflict_shards and options.explain and solved.status in ("OPTIMAL", "FEASIBLE"):
        placed = [k for k in problem.shards if k not in conflict_shards and k not in reasons]
        explanation = explain_conflict(
            problem,
            conflict_shards + placed,
            [r.encode for r in RULES],
            min(10.0, options.time_limit or 10.0),
        )
    for key in conflict_shards:
        reasons[key] = (
            explanation[0]
            if explanation
            else "not placed: the solver found no room that keeps every hard rule"
        )
    if solved.status not in ("OPTIMAL", "FEASIBLE"):
        for key in conflict_shards:
            reasons[key] = f"solver status {solved.status}: no plan found in time"
    for member in missing:
        placement.unplaced[member.key] = reasons[member.shard_key]
