"""Large neighbourhood search: spend what is left of the budget improving a plan not proven.

The levels solve zones, racks and nodes one after another, so the nodes level can leave pods
out that a whole-cluster model would place (bin packing across node pools, taints, affinity).
The whole model is too large for the budget; a neighbourhood of it is not. Each step draws a
few shards left out and nodes their pods could run on (in every zone), frees the whole shards
with pending pods placed on those nodes, fixes everything else where the plan puts it, and
re-solves that part exactly with the node-class model (solver/classes/), started from the
plan's own answer.
A change is kept only when the caller's judge (the independent checker) ranks it better, so the
plan never gets worse; the search stops once the caller finds the plan proven, or before the
deadline.
"""

import random
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from models.cluster import Member, Node, Pod
from models.policy import Policy
from models.snapshot import Snapshot
from solver.classes.model import ClassOptions, solve_classes
from solver.classes.problem import Problem, build_problem, limit_candidates
from solver.placement import Placement
from solver.predicates import blocking_reason, node_accepts_new_pods

Judged = TypeVar("Judged")

STEP_SECONDS = 1.2
"""CP-SAT time for one neighbourhood: short enough that progress lines stay under 2 s apart
(with building and judging the step; steps took 0.6-1.3 s on the hetero benchmarks), long
enough to improve a neighbourhood of about a hundred shards."""
FIRST_SIZE = 120
"""Pending pods freed in the first neighbourhood; it grows after a step proven optimal within its
time and shrinks after one that ran out of time."""
MIN_SIZE, MAX_SIZE = 30, 600
MAX_VARIABLES = 12_000
"""Decision variables one neighbourhood keeps (the roomiest classes of each rack beyond that)."""


@dataclass
class SearchOptions(Generic[Judged]):
    until: float
    """time.monotonic() by which the last step, judged, must be done."""
    judge: Callable[[Placement], Judged]
    order: Callable[[Judged], tuple[Any, ...]]
    """Smaller is better (the ranking the caller weighs its candidates by)."""
    proven: Callable[[Judged], bool]
    workers: int = 1
    seed: int = 0
    report: Callable[[str], None] = lambda _phase: None
    first_step: float = 0.0
    """Seconds a step costs beyond its CP-SAT time before one has been measured (building its
    model, judging its plan): on a large cluster the first step must not overrun the deadline."""


@dataclass
class SearchResult(Generic[Judged]):
    best: Judged
    steps: int
    kept: int


def improve(
    snapshot: Snapshot,
    policy: Policy,
    start: Placement,
    judged: Judged,
    options: SearchOptions[Judged],
) -> SearchResult[Judged]:
    """Re-solve neighbourhoods of ``start`` (judged as ``judged``) until proven or out of time;
    the best judged plan found, never ranked worse than the start."""
    rng = random.Random(options.seed)
    current, best = start, judged
    size, steps, kept = FIRST_SIZE, 0, 0
    step_cost = options.first_step
    nodes = _open_nodes(snapshot)
    while nodes and not options.proven(best):
        began = time.monotonic()
        left = options.until - began - step_cost
        if left < 0.3:
            break
        freed, chosen = _neighbourhood(snapshot, current, nodes, size, rng)
        if not freed:
            break
        unplaced = sum(1 for m in snapshot.pending if m.key not in current.node)
        options.report(
            f"improving the plan: step {steps + 1}, {unplaced} pods unplaced, re-solving "
            f"{len(freed)} shards over {len(chosen)} nodes"
        )
        solution = _resolve(
            snapshot, policy, current, freed, chosen, min(STEP_SECONDS, left), options
        )
        steps += 1
        if solution is not None:
            placement, optimal, whole = solution
            candidate = options.judge(placement)
            if options.order(candidate) < options.order(best):
                current, best = placement, candidate
                kept += 1
            if optimal and whole:
                break  # the whole problem, solved to optimality: no neighbourhood can do better
            size = min(MAX_SIZE, int(size * 1.3)) if optimal else max(MIN_SIZE, int(size / 1.3))
        else:
            size = max(MIN_SIZE, int(size / 1.3))
        step_cost = max(0.0, time.monotonic() - began - min(STEP_SECONDS, left)) + 0.1
    return SearchResult(best, steps, kept)


def _open_nodes(snapshot: Snapshot) -> list[Node]:
    """Nodes that take new pods."""
    return [n for n in snapshot.nodes if n.zone is not None and node_accepts_new_pods(n)]


def _signature(pod: Pod) -> tuple[object, ...]:
    return (pod.tolerations, tuple(sorted(pod.node_selector.items())), pod.affinity_terms)


def _neighbourhood(
    snapshot: Snapshot,
    placement: Placement,
    nodes: list[Node],
    size: int,
    rng: random.Random,
) -> tuple[set[str], set[str]]:
    """Shards to free and the nodes they may use.

    A few shards left out are drawn first; nodes are then drawn, those their pods could run on
    more often than the rest (in every zone, so a shard spread over zones can be placed),
    until the pending pods placed on them reach ``size``. Freed: the drawn shards left out and
    every shard with a pending pod placed on a drawn node (whole shards: they place whole).
    """
    pending_by_shard: dict[str, list[Member]] = defaultdict(list)
    for m in snapshot.pending:
        if not m.pod.deleting:
            pending_by_shard[m.shard_key].append(m)
    placed_on: dict[str, set[str]] = defaultdict(set)
    left_out: list[str] = []
    for shard, members in pending_by_shard.items():
        if all(m.key not in placement.node for m in members):
            left_out.append(shard)
        for m in members:
            node = placement.node.get(m.key)
            if node is not None:
                placed_on[node].add(shard)
    rng.shuffle(left_out)
    drawn = left_out[: max(3, size // 15)]
    fits: dict[tuple[object, ...], set[str]] = {}
    wanted: dict[str, int] = defaultdict(int)
    for shard in drawn:
        pod = pending_by_shard[shard][0].pod
        sig = _signature(pod)
        if sig not in fits:
            fits[sig] = {n.name for n in nodes if blocking_reason(pod, n) is None}
        for name in fits[sig]:
            wanted[name] += 1
    # Weighted draw without replacement: nodes the drawn shards fit on, and nodes with room
    # for the pods they displace, first (mostly: the draw is random).
    room = _room(snapshot, placement)
    order = sorted(
        nodes,
        key=lambda n: -(1.0 + 3.0 * min(1, wanted[n.name]) + 3.0 * room[n.name]) * rng.random(),
    )
    chosen: set[str] = set()
    pods = 0
    for n in order:
        chosen.add(n.name)
        pods += sum(
            1
            for s in placed_on[n.name]
            for m in pending_by_shard[s]
            if placement.node.get(m.key) == n.name
        )
        if pods >= size:
            break
    freed = set(left_out if len(chosen) == len(nodes) else drawn)
    for name in chosen:
        freed |= placed_on[name]
    return freed, chosen


def _room(snapshot: Snapshot, placement: Placement) -> dict[str, float]:
    """Per node: the share of its memory the plan leaves free (0 to 1)."""
    used: dict[str, int] = defaultdict(int)
    for pod in snapshot.other_pods:
        if pod.node_name:
            used[pod.node_name] += pod.requests.memory
    for m in snapshot.members:
        node = m.pod.node_name or placement.node.get(m.key)
        if node:
            used[node] += m.pod.requests.memory
    return {
        n.name: max(0.0, 1 - used[n.name] / n.allocatable.memory) if n.allocatable.memory else 0.0
        for n in snapshot.nodes
    }


def _fixed_snapshot(snapshot: Snapshot, placement: Placement, freed: set[str]) -> Snapshot:
    """The snapshot with every pending pod the plan places outside ``freed`` running there."""
    members: list[Member] = []
    for m in snapshot.members:
        node = placement.node.get(m.key)
        if m.pod.pending and node is not None and m.shard_key not in freed:
            pod = m.pod.model_copy(update={"node_name": node, "phase": "Running"})
            m = m.model_copy(update={"pod": pod, "role": placement.role.get(m.key, m.role)})
        members.append(m)
    return snapshot.model_copy(update={"members": tuple(members)})


def _restrict(problem: Problem, freed: set[str], chosen: set[str], placement: Placement) -> Problem:
    """Only freed shards move, only to the classes of the chosen nodes or where they are now
    (nodes of one class are identical for every rule, so any of them will do)."""
    allowed = {problem.node_class[n] for n in chosen if n in problem.node_class}
    keep: dict[int, set[int]] = {}
    for g in problem.groups:
        if g.shard not in freed:
            g.candidates = []
            continue
        now = {
            problem.node_class[n]
            for n in (placement.node.get(m.key) for m in g.members)
            if n is not None and n in problem.node_class
        }
        g.candidates = [c for c in g.candidates if c in allowed or c in now]
        keep[g.index] = now
    return limit_candidates(problem, MAX_VARIABLES, keep=keep)


def _resolve(
    snapshot: Snapshot,
    policy: Policy,
    placement: Placement,
    freed: set[str],
    chosen: set[str],
    seconds: float,
    options: SearchOptions[Judged],
) -> tuple[Placement, bool, bool] | None:
    """One neighbourhood re-solved: the whole plan with it changed, whether CP-SAT proved the
    neighbourhood optimal, and whether the neighbourhood was the whole problem (every pending
    shard free over every node, no candidate left out)."""
    fixed = _fixed_snapshot(snapshot, placement, freed)
    problem = _restrict(
        build_problem(fixed, policy, "place", max_variables=None), freed, chosen, placement
    )
    if not any(g.candidates for g in problem.groups):
        return None
    whole = (
        not problem.pruned
        and all(g.shard in freed for g in problem.groups)
        and len(chosen) >= sum(1 for n in snapshot.nodes if n.name in problem.node_class)
    )
    solution = solve_classes(
        problem,
        ClassOptions(time_limit=seconds, workers=options.workers, seed=options.seed),
        placement,
    )
    if solution.status not in ("OPTIMAL", "FEASIBLE"):
        return None
    out = Placement()
    for m in snapshot.members:
        if m.shard_key in freed and m.pod.pending:
            node = solution.placement.node.get(m.key)
            if node is not None:
                out.node[m.key] = node
                out.role[m.key] = solution.placement.role[m.key]
        elif m.key in placement.node:
            out.node[m.key] = placement.node[m.key]
            out.role[m.key] = placement.role[m.key]
    return out, solution.status == "OPTIMAL", whole
