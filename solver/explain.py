"""Why pods cannot be placed, in words.

Two levels, like kube-scheduler's messages: a pod no node accepts at all gets the filter summary
("0/12 nodes: 4 not Ready, 8 insufficient memory"); shards that fit alone but not together get the
rules CP-SAT finds in conflict, from an unsatisfiable core over per-rule assumption literals.
"""

from collections import Counter

from ortools.sat.python import cp_model

from models.cluster import Member
from models.resources import Resources
from solver.classes.cpmodel import PlacementModel, build_variables
from solver.classes.problem import Problem
from solver.predicates import blocking_reason


def filter_summary(problem: Problem, member: Member) -> str:
    """The kube-scheduler style tally of why each node refuses this pod."""
    reasons: Counter[str] = Counter()
    load = problem.pod_load
    for node in problem.snapshot.nodes:
        reason = blocking_reason(member.pod, node)
        if reason is None:
            free = node.allocatable - load.get(node.name, Resources())
            req = member.pod.requests
            if req.cpu > free.cpu:
                reason = "insufficient cpu"
            elif req.memory > free.memory:
                reason = "insufficient memory"
            elif req.pods > free.pods:
                reason = "too many pods"
            else:
                reason = "holds another member of the shard or no room left"
        reasons[reason] += 1
    total = len(problem.snapshot.nodes)
    parts = ", ".join(
        f"{count} {reason}" for reason, count in sorted(reasons.items(), key=lambda kv: -kv[1])
    )
    return f"0/{total} nodes are available: {parts}" if parts else "the cluster has no nodes"


def explain_conflict(
    problem: Problem, shards: list[str], encode_rules: object, time_limit: float
) -> list[str]:
    """Solve with every shard forced in, each hard rule behind an assumption, and read the core."""
    pm = PlacementModel(problem, explain=True)
    build_variables(pm)
    for encode in encode_rules:  # type: ignore[attr-defined]
        encode(pm)
    assumptions: list[cp_model.IntVar] = []
    described: dict[int, str] = {}
    for key in shards:
        lit = pm.placed.get(key)
        if lit is not None:
            assumptions.append(lit)
            described[lit.index] = f"place shard {key}"
    for guard in pm.guards.values():
        assumptions.append(guard.literal)
        described[guard.literal.index] = f"{guard.rule} ({guard.subject})"
    if not assumptions:
        return []
    pm.model.add_assumptions(assumptions)
    solver = cp_model.CpSolver()
    solver.parameters.max_time_in_seconds = time_limit
    solver.parameters.num_workers = 1
    status = solver.solve(pm.model)
    if status != cp_model.INFEASIBLE:
        return [
            "the shards fit one at a time but not all together within the time given; "
            "placing them would leave others without room (try a longer --time-limit)"
        ]
    core = [
        described[i] for i in solver.sufficient_assumptions_for_infeasibility() if i in described
    ]
    wanted = [c for c in core if c.startswith("place shard")]
    rules = sorted({c for c in core if not c.startswith("place shard")})
    if not rules:
        return [f"{', '.join(w[len('place shard ') :] for w in wanted)}: cannot all be placed"]
    who = ", ".join(w[len("place shard ") :] for w in wanted) or "the pending shards"
    return [f"{who}: cannot be placed together; these rules conflict: " + "; ".join(rules)]
