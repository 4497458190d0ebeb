"""Benchmark: CP-SAT and the greedy baseline side by side on generated clusters.

    python -m benchmarks.run [--sizes small,batch,...] [--survive none,zone] [--time-limit S]
                             [--workers N] [--cli] [--warm]

Prints one table row per case and solver: nodes, pending pods, wall seconds, status, engine,
objective, bound, gap, hard violations and unplaced pods (both from the independent checker),
replicas sharing a zone with their master, moves and failovers, the worst single-zone master
loss, and for the Redis cluster most piled up in one rack: its worst rack's masters (beside the
even spread, ceil(masters / racks), and their ratio) and the racks holding its masters. The ``rebalance`` case solves
in rebalance mode; its greedy row is the running placement left as it is. With ``--cli`` each
case also runs the real command (``redis-placer plan -f DUMP -o json --mode MODE``) in a child
process and reports its wall time, from start to printed plan, and its peak memory. With
``--warm`` each case is solved twice more the way the binder solves its next batch, with the
kept members' assignments already built by the solve before: once judging every candidate in
full, once with the binder's warm caches (solver/warm.py: the checker's verdict on the running
placement and the levels' totals of it, built beforehand and not timed, as the binder keeps them
between batches).
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import Any

from models.cluster import Role
from models.kube_objects import build_snapshot, flatten
from models.plan import Mode, Plan
from models.policy import Policy
from models.snapshot import Snapshot
from models.synthetic import generate_cluster
from solver.check import check_plan, evaluate_objective, final_placement, worst_domain_loss
from solver.greedy import greedy_plan
from solver.placement import clear_caches
from solver.solve import SolveOptions, solve
from solver.warm import Warm

TIGHT = {
    "zone_shares": (0.5, 0.3, 0.2),
    "node_sizes": (("8", "32Gi"), ("16", "64Gi")),
    "redis_sizes": (("2", "12Gi"),),
}


@dataclass(frozen=True)
class Case:
    name: str
    nodes: int
    pending_shards: int
    running_shards: int
    time_limit: float
    shape: dict[str, Any] = field(default_factory=dict)
    mode: Mode = "place"


CASES = {
    "tiny": Case("12 nodes / 4 shards", 12, 4, 0, 10),
    "small": Case("100 nodes / 300 pods", 100, 100, 0, 10),
    "medium": Case("500 nodes / 1,000 pods", 500, 333, 0, 10),
    "batch": Case("1,000 nodes / 600 shards x 3", 1000, 600, 0, 10),
    "large": Case("1,000 nodes / 3,000 pods", 1000, 1000, 0, 10),
    "xlarge": Case("5,000 nodes / 15,000 pods", 5000, 5000, 0, 60),
    "add-one": Case("1 shard into 5,000 nodes / 15,000 running", 5000, 1, 5000, 10),
    "add-batch": Case("100 shards into 5,000 nodes / 15,000 running", 5000, 100, 5000, 10),
    "tight": Case("300 nodes, zones 50/30/20, 12Gi pods / 250 shards", 300, 250, 0, 10, TIGHT),
    "tighter": Case("300 nodes, zones 50/30/20, 12Gi pods / 400 shards", 300, 400, 0, 10, TIGHT),
    "clusters": Case(
        "2,000 nodes / 2,000 shards of 3 Redis clusters", 2000, 2000, 0, 10, {"clusters": 3}
    ),
    "spread": Case(
        "1,000 nodes, 3 zones x 10 uneven racks / 300 shards",
        1000,
        300,
        0,
        10,
        {"racks_per_zone": 10, "rack_sizes": (13, 23)},
    ),
    "spread-xl": Case(
        "5,000 nodes, 3 zones x 20 uneven racks / 500 shards",
        5000,
        500,
        0,
        20,
        {"racks_per_zone": 20, "rack_sizes": (65, 114)},
    ),
    "rebalance": Case(
        "rebalance 1,000 nodes / 400 running shards", 1000, 0, 400, 10, mode="rebalance"
    ),
    "rebalance-100": Case(
        "rebalance 100 nodes / 40 running shards", 100, 0, 40, 10, mode="rebalance"
    ),
    "rebalance-2000": Case(
        "rebalance 2,000 nodes / 800 running shards", 2000, 0, 800, 10, mode="rebalance"
    ),
    "rebalance-2000-pending": Case(
        "rebalance 2,000 nodes / 2,000 running + 800 pending shards",
        2000,
        800,
        2000,
        10,
        mode="rebalance",
    ),
}
HEADERS = [
    "case",
    "survive",
    "solver",
    "nodes",
    "pending",
    "seconds",
    "status",
    "engine",
    "objective",
    "bound",
    "gap",
    "hard",
    "unplaced",
    "zone-shared",
    "moves / failovers",
    "worst zone",
    "worst rack (even)",
    "racks with masters",
]


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


def rack_spread(snapshot: Snapshot, plan: Plan) -> tuple[str, str]:
    """The Redis cluster whose worst rack holds the largest share of its masters, beside the
    even spread ceil(masters / racks), and the racks that hold its masters of all racks."""
    final = final_placement(snapshot, plan)
    nodes = snapshot.node_by_name
    racks = {n.rack for n in snapshot.nodes}
    per_rack: dict[str, Counter[str]] = defaultdict(Counter)
    for m in snapshot.members:
        node, role = final.get(m.key, (None, None))
        if role is Role.MASTER and node in nodes:
            per_rack[m.cluster][nodes[node].rack] += 1
    worst: tuple[float, str, str] | None = None
    for counts in per_rack.values():
        total, most = sum(counts.values()), max(counts.values())
        even = -(-total // len(racks))
        figure = (
            most / even,
            f"{most} of {total} = {most / total:.1%} ({even}, x{most / even:.2f})",
            f"{len(counts)} / {len(racks)}",
        )
        worst = figure if worst is None or figure[0] > worst[0] else worst
    return (worst[1], worst[2]) if worst else ("-", "-")


def row(
    case: Case,
    survive: str,
    snapshot: Snapshot,
    policy: Policy,
    plan: Plan,
    seconds: float,
    solver: str,
) -> list[str]:
    hard = sum(1 for v in check_plan(snapshot, policy, plan) if v.severity == "hard")
    zone = next(d for d in worst_domain_loss(snapshot, policy, plan) if d.level == "zone")
    objective = evaluate_objective(snapshot, policy, plan)["total"]
    ours = solver.startswith("cp-sat")
    return [
        case.name,
        survive,
        solver,
        str(len(snapshot.nodes)),
        str(len(snapshot.pending)),
        f"{seconds:.2f}",
        plan.status if ours else "-",
        plan.engine if ours else "-",
        f"{objective:g}",
        f"{plan.bound:g}" if ours else "-",
        f"{plan.gap:.2%}" if ours else "-",
        str(hard),
        str(len(plan.unplaced)),
        str(zone_sharing(snapshot, plan)),
        f"{sum(1 for a in plan.assignments if a.action == 'move')} / {len(plan.failovers)}",
        f"{zone.master_loss_ratio:.1%}",
        *rack_spread(snapshot, plan),
    ]


def cli_run(
    document: dict[str, Any], policy: Policy, time_limit: float, mode: Mode
) -> tuple[float, float, str]:
    """The real command on the case's dump: (wall seconds, peak RSS in MiB, status)."""
    with tempfile.TemporaryDirectory() as folder:
        dump = os.path.join(folder, "dump.json")
        with open(dump, "w") as f:
            json.dump(document, f)
        policy_file = os.path.join(folder, "policy.json")
        with open(policy_file, "w") as f:
            json.dump(policy.model_dump(mode="json", by_alias=True), f)
        command = [
            sys.executable,
            "-m",
            "placer.cli",
            "plan",
            "-f",
            dump,
            "-p",
            policy_file,
            "-o",
            "json",
            "--time-limit",
            str(time_limit),
            "--mode",
            mode,
        ]
        # A wrapper process measures its one child: wall time and peak resident memory.
        wrapper = (
            "import resource, subprocess, sys, time\n"
            "t = time.monotonic()\n"
            "done = subprocess.run(sys.argv[1:], stdout=subprocess.PIPE)\n"
            "wall = time.monotonic() - t\n"
            "peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss\n"
            "sys.stderr.write(f'{wall} {peak}\\n')\n"
            "sys.stdout.write(done.stdout.decode())\n"
        )
        done = subprocess.run(
            [sys.executable, "-c", wrapper, *command], capture_output=True, text=True, check=False
        )
        wall_text, peak_text = done.stderr.strip().splitlines()[-1].split()
        wall, peak = float(wall_text), int(peak_text) / 1024
    try:
        status = json.loads(done.stdout)["status"]
    except (ValueError, KeyError):
        status = f"exit {done.returncode}"
    return wall, peak, status


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--sizes", default="tiny,small,medium,batch,large")
    parser.add_argument("--survive", default="none,zone")
    parser.add_argument("--time-limit", type=float, default=None)
    parser.add_argument("--workers", type=int, default=None)
    parser.add_argument("--cli", action="store_true", help="also time the real command")
    parser.add_argument(
        "--warm",
        action="store_true",
        help="also time the next batch's solve, as the binder runs it",
    )
    args = parser.parse_args()
    print(" | ".join([*HEADERS, *(["command s", "peak MiB"] if args.cli else [])]))
    print(" | ".join("---" for _ in HEADERS + (["", ""] if args.cli else [])))
    for key in args.sizes.split(","):
        case = CASES[key]
        for survive in args.survive.split(","):
            policy = Policy.model_validate({"rules": {"survive": survive}})
            document = generate_cluster(
                case.nodes,
                case.pending_shards,
                running_shards=case.running_shards,
                seed=7,
                **case.shape,
            )
            snapshot = build_snapshot(flatten([document]), policy)
            limit = args.time_limit or case.time_limit
            clear_caches()  # each row pays for its own first solve, as one command does
            started = time.monotonic()
            plan = solve(
                snapshot, policy, case.mode, SolveOptions(time_limit=limit, workers=args.workers)
            )
            ours = row(case, survive, snapshot, policy, plan, time.monotonic() - started, "cp-sat")
            if args.cli:
                wall, peak, status = cli_run(document, policy, limit, case.mode)
                ours += [f"{wall:.2f} ({status})", f"{peak:.0f}"]
            print(" | ".join(ours), flush=True)
            if args.warm:
                warm = Warm(policy)
                warm.prepare(snapshot, policy)
                for label, kept in (("cp-sat warm", None), ("cp-sat warm, caches", warm)):
                    options = SolveOptions(
                        time_limit=limit,
                        workers=args.workers,
                        verdict=kept.verdict if kept else None,
                        standing=kept.standing if kept else None,
                    )
                    started = time.monotonic()
                    plan = solve(snapshot, policy, case.mode, options)
                    again = row(
                        case, survive, snapshot, policy, plan, time.monotonic() - started, label
                    )
                    print(" | ".join(again + (["", ""] if args.cli else [])), flush=True)
            started = time.monotonic()
            baseline = greedy_plan(snapshot, policy)
            theirs = row(
                case, survive, snapshot, policy, baseline, time.monotonic() - started, "greedy"
            )
            print(" | ".join(theirs + (["", ""] if args.cli else [])), flush=True)


if __name__ == "__main__":
    main()
