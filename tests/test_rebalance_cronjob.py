"""The rebalance CronJob converges: run it, carry out its changes, run it again.

Careless clusters (models/synthetic.py places running shards anywhere with room, so masters
double up on nodes), the CronJob's default caps, three runs. Hard violations never rise from one
run to the next, each run makes progress while any is left (or says that nothing can be done),
the first run removes every master-exclusivity violation that failovers alone can remove (found
here by brute force over every choice of masters), and what stays says why.
"""

import itertools
import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from models.cluster import Role
from models.kube_objects import build_snapshot, flatten
from models.policy import Policy
from models.synthetic import generate_cluster, node, redis_pod
from placer.cli import main
from solver.check import audit


def _rebalance(tmp_path: Path, document: dict[str, Any]) -> dict[str, Any]:
    dump = tmp_path / "cluster.json"
    dump.write_text(json.dumps(document))
    result = CliRunner().invoke(
        main, ["rebalance", "-f", str(dump), "-o", "json", "--time-limit", "3"]
    )
    assert result.exit_code in (0, 1), result.output
    start = result.output.index("{")
    return json.loads(result.output[start : result.output.rindex("}") + 1])


def _carry_out(document: dict[str, Any], changes: list[dict[str, str]]) -> None:
    """What --apply and the binder would leave: roles swapped, moved pods on their target."""
    pods = {
        f"{i['metadata']['namespace']}/{i['metadata']['name']}": i
        for i in document["items"]
        if i["kind"] == "Pod"
    }
    for change in changes:
        if change["kind"] == "failover":
            pods[change["from"]]["metadata"]["labels"]["redis-role"] = "replica"
            pods[change["to"]]["metadata"]["labels"]["redis-role"] = "master"
        else:
            pods[change["pod"]]["spec"]["nodeName"] = change["to"]


def _hard(report: dict[str, Any], key: str) -> list[dict[str, Any]]:
    return [v for v in report[key] if v["severity"] == "hard"]


def _fewest_doubled_by_failovers(document: dict[str, Any]) -> int:
    """Brute force: over-full nodes left by the best choice of one master per shard."""
    policy = Policy()
    snapshot = build_snapshot(flatten([document]), policy)
    choices = [
        [m.pod.node_name for m in members if m.pod.node_name]
        for members in snapshot.shards.values()
    ]
    best = len(snapshot.nodes)
    for pick in itertools.product(*choices):
        per_node = Counter(pick)
        best = min(best, sum(1 for n in per_node.values() if n > 1))
    return best


CLUSTERS = [(8, 6, 2), (10, 8, 6), (10, 8, 7), (30, 12, 4)]


@pytest.mark.parametrize(("nodes", "shards", "seed"), CLUSTERS)
def test_three_cronjob_runs_converge(tmp_path: Path, nodes: int, shards: int, seed: int) -> None:
    document = generate_cluster(nodes, 0, running_shards=shards, seed=seed)
    before = audit(build_snapshot(flatten([document]), Policy()), Policy())
    assert any(v.rule == "master-exclusivity" for v in before)  # careless: masters doubled up
    reachable = _fewest_doubled_by_failovers(document) if shards <= 8 else None
    counts = [sum(1 for v in before if v.severity == "hard")]
    for run in range(3):
        report = _rebalance(tmp_path, document)
        assert len(_hard(report, "auditBefore")) == counts[-1]
        left = _hard(report, "violationsAfterPlan")
        assert len(left) <= counts[-1]  # never worse than leaving it be
        assert all(v.get("why") for v in left)  # what stays says why
        if counts[-1] and len(left) == counts[-1]:
            # No fewer: then the run still changes something, or nothing can be done.
            assert report["changes"] or all(
                v["why"].startswith(("no room", "the rules")) for v in left
            )
        if run == 0 and reachable is not None:
            doubled = [v for v in left if v["rule"] == "master-exclusivity"]
            assert len(doubled) <= reachable
        _carry_out(document, report["changes"])
        counts.append(len(left))
    assert counts[-1] < counts[0]
    assert counts[-1] == 0, counts


def test_a_cap_that_holds_a_fix_back_says_so(tmp_path: Path) -> None:
    document = generate_cluster(30, 0, running_shards=12, seed=4)
    dump = tmp_path / "cluster.json"
    dump.write_text(json.dumps(document))
    result = CliRunner().invoke(
        main,
        ["rebalance", "-f", str(dump), "-o", "json", "--time-limit", "3", "--max-failovers", "0"],
    )
    report = json.loads(result.output[result.output.index("{") : result.output.rindex("}") + 1])
    left = _hard(report, "violationsAfterPlan")
    assert left and not [c for c in report["changes"] if c["kind"] == "failover"]
    assert any("--max-failovers 0" in v["why"] for v in left)


def test_the_repair_never_promotes_where_a_master_already_is() -> None:
    """Direct check of the failover phase: each chosen master alone on its node, or kept."""
    from solver.repair import Caps, repair

    policy = Policy()
    snapshot = build_snapshot(flatten([generate_cluster(30, 0, running_shards=12, seed=4)]), policy)
    fixed = repair(snapshot, policy, Caps(max_moves=0), until=float("inf"))
    masters = Counter(
        fixed.placement.node[k] for k, r in fixed.placement.role.items() if r is Role.MASTER
    )
    was = Counter(m.pod.node_name for m in snapshot.members if m.role is Role.MASTER)
    assert sum(n - 1 for n in masters.values() if n > 1) < sum(n - 1 for n in was.values() if n > 1)
    assert fixed.moves == 0 and fixed.failovers > 0


def _crowded() -> dict[str, Any]:
    """Four shards on the same three nodes (four masters, three nodes) and one empty node:
    failovers alone leave one node with two masters; a replica moved to the empty node, then
    promoted, fixes it."""
    items = [node(f"n{i}", f"zone-{'abca'[i]}", f"rack-{i}", "32", "128Gi") for i in range(4)]
    for s in range(4):
        for r in range(3):
            role = "master" if r == 0 else "replica"
            items.append(redis_pod(f"r-{s}-{r}", "redis", str(s), role, "1", "4Gi", f"n{r}"))
    return {"apiVersion": "v1", "kind": "List", "items": items}


def test_a_fix_that_needs_a_move_takes_two_runs(tmp_path: Path) -> None:
    document = _crowded()
    first = _rebalance(tmp_path, document)
    left = _hard(first, "violationsAfterPlan")
    assert len(left) == 1 and len(_hard(first, "auditBefore")) == 1
    moves = [c for c in first["changes"] if c["kind"] == "move"]
    assert len(moves) == 1 and moves[0]["to"] == "n3"  # the node without a master
    assert left[0]["why"]
    _carry_out(document, first["changes"])
    second = _rebalance(tmp_path, document)
    assert not _hard(second, "violationsAfterPlan")
    assert [c["to"] for c in second["changes"] if c["kind"] == "failover"] == [moves[0]["pod"]]


def test_the_repair_says_a_master_waits_for_a_move_then_a_failover() -> None:
    from solver.repair import Caps, repair

    policy = Policy()
    snapshot = build_snapshot(flatten([_crowded()]), policy)
    fixed = repair(snapshot, policy, Caps(max_moves=1), until=float("inf"))
    assert fixed.moves == 1 and fixed.failovers == 2
    assert any("next run promotes" in why for why in fixed.why.values())
    held_back = repair(snapshot, policy, Caps(max_moves=0), until=float("inf"))
    assert held_back.moves == 0
    assert any(why.startswith("the cap: --max-moves 0") for why in held_back.why.values())


def test_a_partial_re_solve_says_what_its_bound_speaks_of(monkeypatch: pytest.MonkeyPatch) -> None:
    import solver.solve
    from solver.solve import SolveOptions, solve

    monkeypatch.setattr(solver.solve, "REBALANCE_WHOLE", 10)  # any cluster counts as large
    policy = Policy()
    snapshot = build_snapshot(flatten([generate_cluster(30, 0, running_shards=12, seed=4)]), policy)
    plan = solve(snapshot, policy, "rebalance", SolveOptions(time_limit=3))
    assert plan.status == "FEASIBLE" and plan.bound == 0
    assert plan.bound_note is not None and "partial re-solve" in plan.bound_note
    assert "of 12" in plan.bound_note  # which part: the shards at fault, of how many


def test_no_pending_pod_is_given_up_for_a_fix() -> None:
    """Pending shards and doubled masters compete for the free nodes: the plan places as many
    pending pods as greedy does around the running cluster, and fixes what is left to fix."""
    from solver.greedy import greedy_placement
    from solver.placement import Placement
    from solver.repair import Caps
    from solver.solve import SolveOptions, solve

    policy = Policy()
    document = generate_cluster(12, 4, running_shards=9, seed=2)
    snapshot = build_snapshot(flatten([document]), policy)
    current = Placement(
        node={m.key: m.pod.node_name for m in snapshot.running if m.pod.node_name},
        role={m.key: m.role or Role.REPLICA for m in snapshot.running},
    )
    greedy = greedy_placement(snapshot, policy, start=current)
    left_by_greedy = sum(1 for m in snapshot.pending if m.key not in greedy.node)
    plan = solve(snapshot, policy, "rebalance", SolveOptions(time_limit=3, caps=Caps(1, None)))
    assert len(plan.unplaced) <= left_by_greedy
    before = [v for v in audit(snapshot, policy) if v.severity == "hard"]
    assert len(plan.hard_violations) < len(before)


def test_gone_nodes_and_deleting_pods_are_left_alone(tmp_path: Path) -> None:
    """A member on a node the snapshot lacks and a replica being deleted: the run plans around
    them (never moves or promotes the deleting pod) and does not crash."""
    document = _crowded()
    pods = [i for i in document["items"] if i["kind"] == "Pod"]
    pods[1]["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"  # r-0-1, a replica
    pods[5]["spec"]["nodeName"] = "n-gone"  # r-1-2, a replica on a node that is gone
    report = _rebalance(tmp_path, document)
    touched = {c.get("pod") for c in report["changes"]} | {c.get("to") for c in report["changes"]}
    assert "redis/r-0-1" not in touched
    assert all(v.get("why") for v in _hard(report, "violationsAfterPlan"))
