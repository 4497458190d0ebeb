"""``redis-placer rebalance`` dry run: the change list, cheapest first."""

import json
import time
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

import placer.rebalance.command as rebalance_command
from models.kube_objects import build_snapshot
from models.plan import Plan
from models.policy import Policy
from models.snapshot import Snapshot
from placer.cli import main
from placer.kube.fake import FakeKubeAdapter
from solver.changes import change_list, guarded_plan, limit_changes
from tests.kube_dicts import node, redis_pod


def dump(tmp_path: Path) -> str:
    objs = [
        node("n1", "a", "a1", memory="64Gi", cpu="16"),
        node("n2", "b", "b1", memory="64Gi", cpu="16"),
        redis_pod("r-0-0", "r", 0, "master", node="n1"),
        redis_pod("r-0-1", "r", 0, "replica", node="n2"),
        redis_pod("r-1-0", "r", 1, "master", node="n1"),
        redis_pod("r-1-1", "r", 1, "replica", node="n2"),
    ]
    path = tmp_path / "dump.yaml"
    path.write_text(yaml.safe_dump({"kind": "List", "items": objs}))
    return str(path)


def test_dry_run_prefers_a_failover(tmp_path: Path) -> None:
    result = CliRunner().invoke(main, ["rebalance", "-f", dump(tmp_path), "-o", "json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["apply"] is False
    assert any(v["rule"] == "master-exclusivity" for v in report["auditBefore"])
    assert [c["kind"] for c in report["changes"]] == ["failover"]
    assert report["violationsAfterPlan"] == [] or all(
        v["severity"] == "soft" for v in report["violationsAfterPlan"]
    )


def test_table_says_dry_run(tmp_path: Path) -> None:
    result = CliRunner().invoke(main, ["rebalance", "-f", dump(tmp_path)])
    assert result.exit_code == 0
    assert "failover" in result.output and "dry run" in result.output


def test_apply_needs_a_live_cluster(tmp_path: Path) -> None:
    result = CliRunner().invoke(main, ["rebalance", "-f", dump(tmp_path), "--apply"])
    assert result.exit_code == 2
    assert "--apply acts on a live cluster" in result.stderr


def test_bundled_rebalance_example_plans_one_failover_then_one_move() -> None:
    """placer/examples/rebalance.yaml (the README's example) has one cheapest fix."""
    from placer.commands.demo import example_path

    path = str(Path(example_path()).with_name("rebalance.yaml"))
    result = CliRunner().invoke(main, ["rebalance", "-f", path, "-o", "json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["roles"] == {"source": "labels"}
    assert sorted(v["rule"] for v in report["auditBefore"] if v["severity"] == "hard") == [
        "master-exclusivity",
        "shard-spread",
    ]
    assert report["changes"] == [
        {
            "kind": "failover",
            "shard": "redis/cache/1",
            "from": "redis/cache-1-0",
            "to": "redis/cache-1-1",
        },
        {
            "kind": "move",
            "shard": "redis/cache/3",
            "pod": "redis/cache-3-1",
            "from": "node-d",
            "to": "node-c",
        },
    ]
    assert [v for v in report["violationsAfterPlan"] if v["severity"] == "hard"] == []


def fake_with_shard_on_one_host(blocked: str | None = None) -> FakeKubeAdapter:
    """Both members of shard 0 on n1 (shard-spread): only an eviction can fix it.

    n2 already runs shard 1's master, so shard 0's replica is the one pod that can go there.
    """
    pods = [
        redis_pod("r-0-0", "r", 0, "master", node="n1"),
        redis_pod("r-0-1", "r", 0, "replica", node="n1"),
        redis_pod("r-1-0", "r", 1, "master", node="n2"),
        redis_pod("r-1-1", "r", 1, "replica", node="n1"),
    ]
    for pod in pods:
        pod["status"]["conditions"] = [{"type": "Ready", "status": "True"}]
    return FakeKubeAdapter(
        nodes=[node(n, z, z, memory="64Gi", cpu="16") for n, z in (("n1", "a"), ("n2", "b"))],
        pods=pods,
        evict_blocked=(lambda pod: blocked) if blocked else None,
    )


def test_apply_evicts_through_the_adapter(monkeypatch: pytest.MonkeyPatch) -> None:
    kube = fake_with_shard_on_one_host()
    monkeypatch.setattr("placer.rebalance.command.make_adapter", lambda kubeconfig, context: kube)
    result = CliRunner().invoke(main, ["rebalance", "--apply", "-o", "json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["changes"] == [
        {"kind": "move", "shard": "default/r/0", "pod": "default/r-0-1", "from": "n1", "to": "n2"}
    ]
    moved = "default/r-0-1"
    assert [(a["kind"], a["target"], a["outcome"]) for a in report["actions"]] == [
        ("evict", moved, "ok")
    ]
    assert kube.evicted == [tuple(moved.split("/"))]
    # the evicted pod is gone (the binder recreates it): of its shard only the master is left,
    # lost with its host; soft survival findings only, no hard violation
    assert {(v["rule"], v["severity"]) for v in report["auditAfter"]} == {("survive", "soft")}


def test_apply_reports_a_pdb_refusal(monkeypatch: pytest.MonkeyPatch) -> None:
    kube = fake_with_shard_on_one_host(blocked="Cannot evict pod as it would violate the PDB")
    monkeypatch.setattr("placer.rebalance.command.make_adapter", lambda kubeconfig, context: kube)
    result = CliRunner().invoke(main, ["rebalance", "--apply"])
    assert result.exit_code == 1, result.output  # the hard violation is still there
    assert "skipped PodDisruptionBudget refused the eviction: Cannot evict pod" in result.stdout
    assert kube.evicted == [] and len(kube.pods) == 4


def _moving_master_plan() -> tuple[Plan, Snapshot]:
    from models.plan import Assignment

    snapshot = build_snapshot(
        [
            node("n1", "a", "a1"),
            node("n2", "b", "b1"),
            node("n3", "c", "c1"),
            redis_pod("r-0-0", "r", 0, "master", node="n1"),
            redis_pod("r-0-1", "r", 0, "replica", node="n2"),
            redis_pod("r-0-2", "r", 0, "replica", node="n2"),
        ],
        Policy(),
    )
    rows = [
        ("default/r-0-0", "n3", "master", "move", "n1"),
        ("default/r-0-1", "n2", "replica", "keep", None),
        ("default/r-0-2", "n1", "replica", "move", "n2"),
    ]
    plan = Plan(
        status="FEASIBLE",
        assignments=[
            Assignment(pod=p, node=n, role=r, cluster="default/r", shard="0", action=a, from_node=f)
            for p, n, r, a, f in rows
        ],
    )
    return plan, snapshot


def test_a_moving_master_is_failed_over_to_a_replica_that_stays_first() -> None:
    """Evicting a master stops writes to its slots until Redis promotes someone: never do it."""
    plan, snapshot = _moving_master_plan()
    changes = change_list(plan, snapshot)
    assert changes[0] == {
        "kind": "failover",
        "shard": "default/r/0",
        "from": "default/r-0-0",
        "to": "default/r-0-1",  # r-0-2 moves too: not the one to promote
    }
    assert [(c["kind"], c.get("pod"), c.get("afterFailover")) for c in changes[1:]] == [
        ("move", "default/r-0-0", "default/r-0-0"),
        ("move", "default/r-0-2", None),
    ]
    without_failovers = limit_changes(changes, max_failovers=0, max_moves=10)
    assert [c.get("pod") for c in without_failovers] == ["default/r-0-2"]  # the master stays
    assert [c["kind"] for c in change_list(plan)] == ["move", "move"]  # no roles known, no guard


def test_a_plan_that_moves_a_master_as_it_stands_is_carried_out_with_the_failover() -> None:
    """plan --mode rebalance shows what rebalance does: the guard's failover, the roles it
    leaves, and the verdict on that placement rather than on the solver's."""
    plan, snapshot = _moving_master_plan()
    carried = guarded_plan(snapshot, Policy(), plan)
    assert [(f.from_, f.to) for f in carried.failovers] == [("default/r-0-0", "default/r-0-1")]
    roles = {a.pod: (a.role, a.node, a.action) for a in carried.assignments}
    assert roles == {
        "default/r-0-0": ("replica", "n3", "move"),
        "default/r-0-1": ("master", "n2", "keep"),
        "default/r-0-2": ("replica", "n1", "move"),
    }
    # r-0-1 (now master) shares nothing with a replica at the host level: judged as it stands.
    assert not [v for v in carried.violations if v.severity == "hard"]
    assert guarded_plan(snapshot, Policy(), carried) == carried  # nothing left to guard


def test_a_run_past_its_time_limit_still_fails_over_and_says_it_was_late(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A run whose limit was spent before it solved (here: begun 100 s ago, 30 s allowed): the
    failovers (one flow, no data moved) are still planned, and stderr says the run was late."""
    monkeypatch.setattr(rebalance_command, "command_started", lambda: time.monotonic() - 100)
    result = CliRunner().invoke(
        main, ["rebalance", "-f", dump(tmp_path), "-o", "json", "--time-limit", "30"]
    )
    report = json.loads(result.stdout)
    assert [c["kind"] for c in report["changes"]] == ["failover"]
    assert "beyond its 30 s time limit" in result.stderr
    monkeypatch.undo()
    on_time = CliRunner().invoke(main, ["rebalance", "-f", dump(tmp_path), "--time-limit", "30"])
    assert "time limit" not in on_time.output
