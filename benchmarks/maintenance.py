"""Benchmark: planned disruptions on real Redis, the maintenance guard beside no tool, one run.

    KUBEBUILDER_ASSETS=/path/to/binaries python -m benchmarks.maintenance
        [--profiles bitnami,ot-operator,valkey-io,hyperspike] [--modes guard,stock]
        [--scenarios drain,second drain,guard killed,rollout,pool upgrade]
        [--start-delay 2] [--attach-delay 20] [--probe-scale 1] [--json FILE] [--workdir DIR]

A control plane of the end-to-end tests (etcd, kube-apiserver, kube-scheduler and
kube-controller-manager from ``KUBEBUILDER_ASSETS``) is started once; on it each profile runs
under each mode in turn (tests.e2e.maintenance_scenarios): ``guard`` installs
``deploy/profiles/NAME`` and runs its binder with ``--guard`` as deployed, ``stock`` runs the same
StatefulSets with no tool. Real redis-server processes run behind the pods (cluster-node-timeout
5 s), the kubelet stand-in starts a container ``--start-delay`` seconds after its pod is bound
(plus ``--attach-delay`` when its volume was attached to another node), runs the chart's
readiness probe on its schedule (``--probe-scale`` 1: the chart's own delays and period), its
preStop and its grace period. One writer per shard does SET + WAIT 1 throughout.

Printed, per profile and scenario, the guard beside stock: the longest write outage of any
shard and of each shard, seconds of ``cluster_state:fail`` (a majority of the live servers /
any of them), shards left with no running server, master changes Redis made (failovers), the
guard's handovers, evictions and the HTTP 429 answers before them, the wall time of the
drain(s), rollout or upgrade, the time until every pod was Ready and Redis whole again, the time
until every zone's loss was survivable again (stock: judged once), and the checker's verdict at
the end. Then acknowledged writes and how many were lost.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from tests.e2e.control_plane import SKIP_REASON, ControlPlane, create_namespace, find_assets
from tests.e2e.maintenance_scenarios import Report, Settings, run_profile

COLUMNS = (
    ("mode", 6),
    ("longest outage s", 8),
    ("outage per shard s", 30),
    ("fail s maj/any", 14),
    ("no member", 9),
    ("failovers", 9),
    ("handovers", 9),
    ("evictions", 9),
    ("429s", 5),
    ("wall s", 7),
    ("settle s", 8),
    ("survivable after s", 10),
)


def _cells(mode: str, row: dict[str, Any]) -> list[str]:
    fail = row["cluster_state fail s (majority / any)"]
    after = row["zones survivable after s"]
    return [
        mode,
        f"{row['longest outage s']:.2f}",
        " ".join(f"{x:.1f}" for x in row["outage per shard s"]),
        f"{fail[0]:.1f} / {fail[1]:.1f}",
        str(row["shards with no running member"]),
        str(row["failovers"]),
        str(row["handovers"]),
        str(row["evictions"])
        + (f" ({len(row['evicted twice'])} twice)" if row["evicted twice"] else ""),
        str(row["429s"]),
        f"{row['wall s']:.1f}",
        f"{row['settle s']:.1f}",
        "no" if after is None else f"{after:.1f}",
    ]


def print_tables(reports: list[Report]) -> None:
    by_profile: dict[str, list[Report]] = {}
    for report in reports:
        by_profile.setdefault(report.profile, []).append(report)
    for profile, runs in by_profile.items():
        scenarios: list[str] = []
        for run in runs:
            for outcome in run.outcomes:
                if outcome.scenario not in scenarios:
                    scenarios.append(outcome.scenario)
        print(f"\n## {profile}")
        print(" | ".join(["scenario", *(name for name, _ in COLUMNS)]))
        for scenario in scenarios:
            for run in runs:
                mode = "guard" if run.guarded else "stock"
                for outcome in run.outcomes:
                    if outcome.scenario == scenario:
                        print(" | ".join([scenario, *_cells(mode, outcome.row())]))
        for run in runs:
            mode = "guard" if run.guarded else "stock"
            print(
                f"{mode}: {run.acknowledged} acknowledged writes, {len(run.lost)} lost; "
                f"end of each scenario: "
                + "; ".join(f"{o.scenario}: {o.survival_end}" for o in run.outcomes)
            )
            for o in run.outcomes:
                if not o.survived_end:
                    print(
                        f"  {mode} {o.scenario}, shards (master/replica zones): {o.notes['layout']}"
                    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--profiles", default="bitnami,ot-operator,valkey-io,hyperspike")
    parser.add_argument("--modes", default="guard,stock")
    parser.add_argument(
        "--scenarios", default="drain,second drain,guard killed,rollout,pool upgrade"
    )
    parser.add_argument("--start-delay", type=float, default=2.0)
    parser.add_argument("--attach-delay", type=float, default=20.0)
    parser.add_argument("--probe-scale", type=float, default=1.0)
    parser.add_argument("--json", type=Path)
    parser.add_argument("--workdir", type=Path)
    args = parser.parse_args()
    assets = find_assets()
    if assets is None:
        sys.exit(SKIP_REASON)
    settings = Settings(
        start_delay_s=args.start_delay,
        attach_delay_s=args.attach_delay,
        probe_scale=args.probe_scale,
        scenarios=tuple(s.strip() for s in args.scenarios.split(",") if s.strip()),
    )
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="maintenance-"))
    plane = ControlPlane(assets, workdir / "plane")
    plane.start()
    if plane.controller_manager_binary is None or not plane.scheduler_running:
        sys.exit("needs kube-scheduler and kube-controller-manager in KUBEBUILDER_ASSETS")
    plane.start_controller_manager()
    reports: list[Report] = []
    print(
        f"settings: start {settings.start_delay_s}s, attach {settings.attach_delay_s}s, probe "
        f"scale {settings.probe_scale}; load {os.getloadavg()}",
        flush=True,
    )
    try:
        for profile in args.profiles.split(","):
            for mode in args.modes.split(","):
                run_id = secrets.token_hex(4)
                namespace = f"maint-{run_id}"
                api = plane.api_client()
                create_namespace(api, namespace)
                api.close()
                folder = workdir / f"{profile}-{mode}"
                folder.mkdir(parents=True, exist_ok=True)
                began = time.monotonic()
                print(f"\n# {profile}, {mode}", flush=True)
                report = run_profile(
                    plane, profile, mode == "guard", namespace, run_id, folder, settings
                )
                print(f"  ({time.monotonic() - began:.0f}s; load {os.getloadavg()})", flush=True)
                reports.append(report)
                if args.json:
                    args.json.write_text(
                        json.dumps([r.as_dict() for r in reports], indent=2, default=str)
                    )
    finally:
        plane.stop()
    print_tables(reports)


if __name__ == "__main__":
    main()
