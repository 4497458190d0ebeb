"""The node-class model solved in one piece: the formulation for rebalance.

Rebalance moves running members and changes masters, each at its cost, so every member keeps
its own identity (its origin node decides what a move is). Nodes identical for every rule form a
class and CP-SAT decides how many members of each group go to each class (solver/classes/
cpmodel.py and the rules' encodings in solver/rules/); solver/classes/assign.py then picks the
node inside each class.

The model is a relaxation of the evaluator's objective (every term it counts is at most what
solver/check.py counts for the same placement, and capacities are exact), so its proven bound is
a valid bound for the plan, unless candidates were limited to keep a large model small.
"""

import math
import time
from collections import defaultdict
from dataclasses import dataclass

from models.cluster import Role
from solver.classes.assign import assign_nodes
from solver.classes.cpmodel import RELAXED_WEIGHT, PlacementModel, build_variables
from solver.classes.problem import Problem
from solver.cpsat import cp_model
from solver.placement import Placement
from solver.rules import RULES

LARGE_MODEL = 20_000


@dataclass
class ClassOptions:
    time_limit: float
    workers: int
    seed: int
    relative_gap: float = 0.0


@dataclass
class ClassSolution:
    status: str
    placement: Placement
    bound: int
    """Valid lower bound of the soft objective when exactly ``unplaced_bound`` pods stay
    unplaced (0 when none is known)."""
    unplaced: int
    unplaced_bound: int = 0
    """No placement leaves fewer pending pods unplaced (0 when nothing is known)."""
    valid: bool = False
    """The bounds speak of the real problem (exact units, every candidate kept)."""


def _objective(pm: PlacementModel) -> int:
    """Unplaced pods cost more than every other term together: placing comes first."""
    upper = sum(pm.constants.values()) + 1
    problem = pm.problem
    members = sum(g.size for g in problem.groups) + len(problem.fixed_members)
    w = problem.policy.weights
    upper += (
        w.rack
        + w.zone
        + w.survival
        + w.rack_survival
        + w.member_spread
        + w.superseded
        + w.master_balance
        + w.move
        + w.failover
    ) * (members + 1) + w.load_balance * 10_001
    upper += RELAXED_WEIGHT * 2 * (members + 1) if pm.strengths_override else 0
    terms = [upper * t for t in pm.unplaced_terms]
    for items in pm.costs.values():
        terms.extend(weight * expr for weight, expr in items)
    pm.model.minimize(sum(terms, 0) + sum(pm.constants.values()))
    return upper


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


def _complete_hint(model: cp_model.CpModel, time_limit: float, seed: int) -> None:
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
    solver.parameters.num_workers = 1
    solver.parameters.random_seed = seed
    if solver.solve(probe) not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        return
    model.clear_hints()
    for index in range(len(proto.variables)):
        var = model.get_int_var_from_proto_index(index)
        model.add_hint(var, solver.value(var))


def solve_classes(
    problem: Problem,
    options: ClassOptions,
    seed: Placement | None,
    strengths: dict[str, str] | None = None,
) -> ClassSolution:
    """One CP-SAT solve of the class model, started from ``seed`` when given."""
    start = time.monotonic()
    pm = PlacementModel(problem, strengths_override=strengths or {})
    build_variables(pm)
    for rule in RULES:
        rule.encode(pm)
    big = _objective(pm)
    if seed is not None:
        _hint(pm, seed)
        _complete_hint(pm.model, max(0.2, 0.2 * options.time_limit), options.seed)
    solver = cp_model.CpSolver()
    params = solver.parameters
    params.max_time_in_seconds = max(0.05, options.time_limit - (time.monotonic() - start))
    params.num_workers = max(1, options.workers)
    params.random_seed = options.seed
    if options.workers == 1:
        params.max_deterministic_time = params.max_time_in_seconds
    if options.relative_gap:
        params.relative_gap_limit = options.relative_gap
    if len(pm.n) > LARGE_MODEL:
        # Presolve would eat the whole budget on large models; search does better with the time.
        params.symmetry_level = 0
        params.cp_model_probing_level = 0
        params.max_presolve_iterations = 1
        params.find_big_linear_overlap = False
    code = solver.solve(pm.model)
    status = solver.status_name(code)
    if code not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        return ClassSolution(status, Placement(), 0, 0)
    counts = {key: int(solver.value(v)) for key, v in pm.n.items()}
    placement = assign_nodes(problem, {k: v for k, v in counts.items() if v})
    unplaced = round(sum(solver.value(t) for t in pm.unplaced_terms)) if pm.unplaced_terms else 0
    raw = math.ceil(solver.best_objective_bound - 1e-6)
    valid = not problem.pruned and problem.exact
    unplaced_bound = raw // big if valid else 0
    bound = max(0, raw - big * unplaced_bound) if valid else 0
    return ClassSolution(status, placement, bound, unplaced, unplaced_bound, valid)
