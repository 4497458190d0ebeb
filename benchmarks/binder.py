"""Benchmark: decision throughput of the binder loop, CP-SAT against the greedy baseline.

    python -m benchmarks.binder [--nodes 5000] [--running-shards 5000] [--batches 5]
                                [--batch-shards 100] [--solvers cp-sat,greedy]
                                [--racks-per-zone 4] [--rack-sizes LOW,HIGH]

A cluster of ``--nodes`` nodes with ``--running-shards`` shards already running sits in the
in-memory adapter (which keeps the API server's rules: one bind per pod, uid preconditions).
Shards then arrive ``--batch-shards`` at a time; each arrival is stepped until it is bound,
the binder cutting it into solves (its batch sizer) and Permit windows as it does when it
runs, one bind per pod. The clock is simulated, so the batch window itself costs nothing: the
figures are decision time only (applying the watch events, the snapshot, the solve, the
checks, the bindings and their events), stepped by hand with the watches followed as
``Binder.run`` follows them. Every batch's result goes through the independent checker.

Printed: one row per solver with pods bound, decision seconds, pods/s, the slowest arrival,
the statuses of its solves, hard violations on the new shards, the objective of the whole
cluster after the last arrival (lower is better; what CP-SAT's extra time buys), the worst
rack's masters of the whole cluster beside the even spread and the racks holding masters
(``--rack-sizes`` makes the racks uneven, filled in name order), and the kube-scheduler reference (PodAntiAffinity at 5,000 nodes: 60 pods/s, from the scheduler_perf
figures).
"""

import argparse
import copy
import gc
import time
from collections import Counter
from dataclasses import dataclass
from typing import Any, Literal, cast

from benchmarks.run import rack_spread
from models.kube_objects import build_snapshot, flatten
from models.policy import Policy
from models.synthetic import generate_cluster
from placer.binder.loop import (
    DEFAULT_BINDER_TIME_LIMIT,
    DEFAULT_RELATIVE_GAP,
    Binder,
    BinderConfig,
)
from placer.kube.fake import FakeKubeAdapter
from solver.check import audit, evaluate_objective, keep_plan

KUBE_SCHEDULER_ANTI_AFFINITY_PODS_PER_SECOND = 60.0


@dataclass
class Result:
    solver: str
    pods: int
    bound: int
    seconds: float
    slowest: float
    statuses: Counter[str]
    hard: int
    objective: float
    """Of the whole cluster after the last batch: what the slower solver's placements buy."""
    worst_rack: str
    racks: str


MAX_STEPS_PER_BATCH = 50
"""A batch the binder cannot finish in this many steps is reported as it stands."""


def cluster(
    nodes: int, running: int, pending: int, shape: dict[str, Any]
) -> tuple[list[Any], list[Any], list[Any]]:
    """Nodes, running pods, and the pending pods in arrival order (whole shards together)."""
    objects = flatten([generate_cluster(nodes, pending, running_shards=running, seed=11, **shape)])
    node_objs = [o for o in objects if o["kind"] == "Node"]
    pods = [o for o in objects if o["kind"] == "Pod"]
    placed = [p for p in pods if p["spec"].get("nodeName")]
    waiting = [p for p in pods if not p["spec"].get("nodeName")]
    return node_objs, placed, waiting


def run(solver: Literal["cp-sat", "greedy"], args: argparse.Namespace, policy: Policy) -> Result:
    shape: dict[str, Any] = {"racks_per_zone": args.racks_per_zone}
    if args.rack_sizes:
        low, high = (int(x) for x in args.rack_sizes.split(","))
        shape["rack_sizes"] = (low, high)
    nodes, placed, waiting = cluster(
        args.nodes, args.running_shards, args.batches * args.batch_shards, shape
    )
    fake = FakeKubeAdapter(nodes=nodes, pods=placed)
    binder = Binder(
        fake,
        policy,
        BinderConfig(solver=solver, time_limit=args.time_limit, relative_gap=args.relative_gap),
    )
    now = 1_000_000.0
    binder.step(now=now)  # the initial list: a binder starts once, not once per batch
    binder.follow_nodes = True  # as ``run`` does: the node watch keeps nodes current
    per_batch = len(waiting) // args.batches
    window = policy.permit.batch_window_seconds
    spent, slowest, bound = 0.0, 0.0, 0
    statuses: Counter[str] = Counter()
    new_pods: set[str] = set()
    for batch in range(args.batches):
        arriving = waiting[batch * per_batch : (batch + 1) * per_batch]
        for pod in arriving:
            fake.add_pod(copy.deepcopy(pod))
            new_pods.add(f"{pod['metadata'].get('namespace', 'default')}/{pod['metadata']['name']}")
        started = time.perf_counter()
        binder.cache.poll(0)  # what run()'s watch threads apply as events arrive
        binder.cache.poll_nodes(0)
        placed_now, status = 0, None
        for _ in range(MAX_STEPS_PER_BATCH):
            # Stepped as run() steps: a full batch is solved at once, a partial one when its
            # window has passed; the simulated clock jumps to the step the binder asks for.
            report = binder.step(now=now)
            placed_now += len(report.bound)
            status = report.solve_status or status
            if report.solve_status:
                statuses[report.solve_status] += 1
            if placed_now >= len(arriving):
                break
            now += min(report.next_step_in, window) + 0.001
        took = time.perf_counter() - started
        spent += took
        slowest = max(slowest, took)
        bound += placed_now
        now += 1.0
        print(
            f"  {solver} batch {batch + 1}: {len(arriving)} pods, {placed_now} bound,"
            f" {took:.2f} s, {status}",
            flush=True,
        )
    final = build_snapshot([*fake.list_nodes(), *fake.list_pods()], policy)
    hard = sum(
        1 for v in audit(final, policy) if v.severity == "hard" and new_pods.intersection(v.pods)
    )
    as_is = keep_plan(final)
    objective = evaluate_objective(final, policy, as_is)["total"]
    worst_rack, racks = rack_spread(final, as_is)
    return Result(
        solver, len(waiting), bound, spent, slowest, statuses, hard, objective, worst_rack, racks
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--nodes", type=int, default=5000)
    parser.add_argument("--running-shards", type=int, default=5000)
    parser.add_argument("--batches", type=int, default=5)
    parser.add_argument("--batch-shards", type=int, default=100)
    parser.add_argument("--solvers", default="cp-sat,greedy")
    parser.add_argument("--time-limit", type=float, default=DEFAULT_BINDER_TIME_LIMIT)
    parser.add_argument("--workers", type=int, default=0, help="policy solver.workers")
    parser.add_argument(
        "--relative-gap", type=float, default=DEFAULT_RELATIVE_GAP, help="as the binder's own"
    )
    parser.add_argument("--racks-per-zone", type=int, default=4)
    parser.add_argument("--rack-sizes", default="", help="LOW,HIGH nodes a rack: uneven racks")
    args = parser.parse_args()
    policy = Policy.model_validate({"solver": {"workers": args.workers}})
    results = []
    for solver in args.solvers.split(","):
        gc.collect()
        results.append(run(cast(Literal["cp-sat", "greedy"], solver), args, policy))
    headers = [
        "binder",
        "nodes",
        "running pods",
        "pods",
        "bound",
        "decision s",
        "pods/s",
        "slowest arrival s",
        "statuses",
        "hard (new shards)",
        "final objective",
        "worst rack (even)",
        "racks with masters",
    ]
    running_pods = args.running_shards * 3
    print()
    print(" | ".join(headers))
    print(" | ".join("---" for _ in headers))
    for r in results:
        statuses = ", ".join(f"{k} {v}" for k, v in sorted(r.statuses.items()))
        print(
            " | ".join(
                [
                    r.solver,
                    str(args.nodes),
                    str(running_pods),
                    str(r.pods),
                    str(r.bound),
                    f"{r.seconds:.2f}",
                    f"{r.bound / r.seconds:.0f}" if r.seconds else "-",
                    f"{r.slowest:.2f}",
                    statuses,
                    str(r.hard),
                    f"{r.objective:g}",
                    r.worst_rack,
                    r.racks,
                ]
            )
        )
    print(
        " | ".join(
            [
                "kube-scheduler (PodAntiAffinity, published)",
                "5000",
                "-",
                "-",
                "-",
                "-",
                f"{KUBE_SCHEDULER_ANTI_AFFINITY_PODS_PER_SECOND:.0f}",
                "-",
                "-",
                "-",
                "-",
                "-",
                "-",
            ]
        )
    )


if __name__ == "__main__":
    main()
