"""Benchmark: the rebalance CronJob run after run, its changes carried out in between.

    python -m benchmarks.cronjob [--sizes rebalance-100,rebalance,...] [--runs 3]
                                 [--time-limit S] [--survive none]

``--sizes`` also takes ``zone-return:NODES``: a cluster after a zone's loss and return
(``zone_return_cluster``), as many shards of three as nodes, 20 s.

For each case of benchmarks/run.py (a careless cluster: running shards placed anywhere with room,
masters doubled up) it runs the real command, ``python -m placer.cli rebalance -f DUMP -o json
--time-limit L`` with the CronJob's default caps (``--max-moves 1``, every failover), in a child
process; carries out the changes on the dump (failovers swap the role labels, a move puts the pod
on its target); and runs again. One row per run: wall seconds of the command (interpreter and
imports included), hard violations before and after its changes, master-exclusivity violations
after, the run's failovers / moves, and the engine of its plan. A last row per case is the
greedy repair alone, uncapped (solver/repair.py, every failover and move it finds at once), for
the comparison of total changes, with the pending pods it leaves unplaced (a run's plan never
leaves more than greedy's placement around the running cluster: pods placed rank first).
"""

import argparse
import json
import random
import subprocess
import sys
import time
from typing import Any

from benchmarks.run import CASES, Case, input_files
from models.kube_objects import build_snapshot, flatten
from models.policy import Policy
from models.synthetic import generate_cluster, node, redis_pod
from solver.changes import change_list
from solver.check import audit
from solver.placement import to_plan
from solver.repair import Caps, repair

HEADERS = [
    "case",
    "run",
    "seconds",
    "limit",
    "hard before",
    "hard after",
    "master-excl. after",
    "failovers / moves",
    "engine",
    "pending left",
]


def carry_out(document: dict[str, Any], changes: list[dict[str, str]], policy: Policy) -> None:
    """What ``--apply`` and the binder leave: roles swapped, each moved pod on its target."""
    role = policy.labels.role
    pods = {
        f"{i['metadata'].get('namespace', 'default')}/{i['metadata']['name']}": i
        for i in document["items"]
        if i["kind"] == "Pod"
    }
    for change in changes:
        if change["kind"] == "failover":
            pods[change["from"]]["metadata"]["labels"][role] = "replica"
            pods[change["to"]]["metadata"]["labels"][role] = "master"
        else:
            pods[change["pod"]]["spec"]["nodeName"] = change["to"]


def zone_return_cluster(nodes: int, shards: int, seed: int) -> dict[str, Any]:
    """After a zone's loss and return: each shard has one member in each of three zones (each
    on a random node of its zone), and every master is in zone a or b, where Redis promoted the
    replicas when zone c went; zone c's members came back as replicas. Masters double up on
    the nodes of a and b while c's nodes hold none: the CronJob's work after such a day."""
    rng = random.Random(seed)
    zones = ("zone-a", "zone-b", "zone-c")
    by_zone: dict[str, list[str]] = {z: [] for z in zones}
    items: list[dict[str, Any]] = []
    for i in range(nodes):
        zone = zones[i % 3]
        name = f"node-{i:05d}"
        by_zone[zone].append(name)
        items.append(node(name, zone, f"{zone}-rack-{(i // 3) % 50}", "16", "64Gi"))
    for s in range(shards):
        master_zone = zones[rng.randrange(2)]
        for zone in zones:
            role = "master" if zone == master_zone else "replica"
            name = f"redis-{s}-{zones.index(zone)}"
            host = rng.choice(by_zone[zone])
            items.append(redis_pod(name, "redis", str(s), role, "1", "4Gi", host))
    return {"apiVersion": "v1", "kind": "List", "items": items}


def run_command(document: dict[str, Any], policy: Policy, limit: float) -> tuple[float, Any]:
    with input_files(document, policy) as (dump, policy_file):
        command = [sys.executable, "-m", "placer.cli", "rebalance", "-f", dump, "-p"]
        command += [policy_file, "-o", "json", "--time-limit", str(limit)]
        began = time.monotonic()
        done = subprocess.run(command, capture_output=True, text=True, check=False)
        wall = time.monotonic() - began
    return wall, json.loads(done.stdout)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--sizes", default="rebalance-100,rebalance,rebalance-2000")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--time-limit", type=float, default=None)
    parser.add_argument("--survive", default="none")
    args = parser.parse_args()
    print(" | ".join(HEADERS))
    print(" | ".join("---" for _ in HEADERS))
    policy = Policy.model_validate({"rules": {"survive": args.survive}})
    for key in args.sizes.split(","):
        if key.startswith("zone-return"):  # zone-return:NODES
            nodes = int(key.partition(":")[2] or 15000)
            name = f"zone return, {nodes:,} nodes / {nodes:,} running shards"
            case = Case(name, nodes, 0, nodes, 20, mode="rebalance")
            document = zone_return_cluster(nodes, nodes, seed=7)
        else:
            case = CASES[key]
            document = generate_cluster(
                case.nodes,
                case.pending_shards,
                running_shards=case.running_shards,
                seed=7,
                **case.shape,
            )
        limit = args.time_limit or case.time_limit
        snapshot = build_snapshot(flatten([document]), policy)
        first = [v for v in audit(snapshot, policy) if v.severity == "hard"]
        total = [0, 0]
        for run in range(1, args.runs + 1):
            wall, report = run_command(document, policy, limit)
            before = [v for v in report["auditBefore"] if v["severity"] == "hard"]
            after = [v for v in report["violationsAfterPlan"] if v["severity"] == "hard"]
            exclusive = [v for v in after if v["rule"] == "master-exclusivity"]
            failovers = sum(1 for c in report["changes"] if c["kind"] == "failover")
            moves = len(report["changes"]) - failovers
            total[0] += failovers
            total[1] += moves
            row = [case.name, str(run), f"{wall:.2f}", f"{limit:g}", str(len(before))]
            row += [str(len(after)), str(len(exclusive)), f"{failovers} / {moves}"]
            row += [report["plan"].get("engine", "-"), "-"]
            print(" | ".join(row), flush=True)
            carry_out(document, report["changes"], policy)
        began = time.monotonic()
        fixed = repair(snapshot, policy, Caps(), until=float("inf"))
        seconds = time.monotonic() - began
        plan = to_plan(snapshot, fixed.placement, "rebalance", "FEASIBLE")
        left = [v for v in audit(snapshot, policy, plan) if v.severity == "hard"]
        changes = change_list(plan, snapshot)
        failovers = sum(1 for c in changes if c["kind"] == "failover")
        row = [case.name, "greedy repair, uncapped", f"{seconds:.2f}", "-", str(len(first))]
        row += [str(len(left)), str(sum(1 for v in left if v.rule == "master-exclusivity"))]
        row += [f"{failovers} / {len(changes) - failovers}", "-", str(len(plan.unplaced))]
        print(" | ".join(row), flush=True)
        print(
            " | ".join([case.name, f"total of {args.runs} runs", "", "", "", "", ""])
            + f" | {total[0]} / {total[1]} |  | ",
            flush=True,
        )


if __name__ == "__main__":
    main()
