"""Benchmark: CP-SAT and the greedy baseline side by side on generated clusters.

    python -m benchmarks.run [--sizes small,medium,...] [--time-limit S] [--workers N]

Prints one table: nodes, pods, wall time, status, objective, bound, gap, hard violations (from the
independent checker), unplaced pods, and replicas sharing a zone with their master.
"""

import argparse
import time
from dataclasses import dataclass

from models.cluster import Role
from models.kube_objects import build_snapshot, flatten
from models.plan import Plan
from models.policy import Policy
from models.snapshot import Snapshot
from models.synthetic import generate_cluster
from solver.check import check_plan, evaluate_objective, final_placement
from solver.greedy import greedy_plan
from solver.solve import SolveOptions, solve


@dataclass(frozen=True)
class Case:
    name: str
    nodes: int
    pending_shards: int
    running_shards: int
    time_limit: float


CASES = {
    "tiny": Case("12 nodes / 4 shards", 12, 4, 0, 10),
    "small": Case("100 nodes / 100x3 pods", 100, 100, 0, 10),
    "medium": Case("500 nodes / 1,000 pods", 500, 333, 0, 10),
    "large": Case("1,000 nodes / 3,000 pods", 1000, 1000, 0, 10),
    "xlarge": Case("5,000 nodes / 15,000 pods", 5000, 5000, 0, 60),
    "add-one": Case("1 shard into 5,000 nodes / 15,000 running", 5000, 1, 5000, 10),
    "add-batch": Case("100 shards into 5,000 nodes / 15,000 running", 5000, 100, 5000, 10),
}


def zone_sharing(snapshot: Snapshot, plan: Plan) -> int:
    final = final_placement(snapshot, plan)
    nodes = snapshot.node_by_name
    count = 0
    for members in snapshot.shards.values():
        master = next(
            (m for m in members if final.get(m.key, (None, None))[1] is Role.MASTER), None
        )
        if master is None or final[master.key][0] is None:
            continue
        mzone = nodes[final[master.key][0]].zone  # type: ignore[index]
        for m in members:
            node, role = final.get(m.key, (None, None))
            if m is not master and node and role is Role.REPLICA and nodes[node].zone == mzone:
                count += 1
    return count


def row(
    name: str, snapshot: Snapshot, policy: Policy, plan: Plan, seconds: float, solver: str
) -> list[str]:
    hard = sum(1 for v in check_plan(snapshot, policy, plan) if v.severity == "hard")
    objective = evaluate_objective(snapshot, policy, plan)["total"]
    bound = f"{plan.bound:g}" if solver == "cp-sat" else "-"
    gap = f"{plan.gap:.2%}" if solver == "cp-sat" else "-"
    return [
        name,
        solver,
        str(len(snapshot.nodes)),
        str(len(snapshot.pending)),
        f"{seconds:.2f}",
        plan.status,
        f"{objective:g}",
        bound,
        gap,
        str(hard),
        str(len(plan.unplaced)),
        str(zone_sharing(snapshot, plan)),
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--sizes", default="tiny,small,medium,large")
    parser.add_argument("--time-limit", type=float, default=None)
    parser.add_argument("--workers", type=int, default=0)
    args = parser.parse_args()
    policy = Policy()
    headers = [
        "case",
        "solver",
        "nodes",
        "pending",
        "seconds",
        "status",
        "objective",
        "bound",
        "gap",
        "hard",
        "unplaced",
        "zone-shared",
    ]
    print(" | ".join(headers))
    print(" | ".join("---" for _ in headers))
    for key in args.sizes.split(","):
        case = CASES[key]
        snapshot = build_snapshot(
            flatten(
                [
                    generate_cluster(
                        case.nodes, case.pending_shards, running_shards=case.running_shards, seed=7
                    )
                ]
            ),
            policy,
        )
        started = time.monotonic()
        plan = solve(
            snapshot,
            policy,
            "place",
            SolveOptions(time_limit=args.time_limit or case.time_limit, workers=args.workers),
        )
        solver_seconds = time.monotonic() - started
        print(
            " | ".join(row(case.name, snapshot, policy, plan, solver_seconds, "cp-sat")), flush=True
        )
        started = time.monotonic()
        baseline = greedy_plan(snapshot, policy)
        print(
            " | ".join(
                row(case.name, snapshot, policy, baseline, time.monotonic() - started, "greedy")
            ),
            flush=True,
        )


if __name__ == "__main__":
    main()
