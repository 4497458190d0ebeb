"""Headroom on small clusters whose answer is known by hand, each confirmed by planning that
many pending shards (all placed) and one more (not all placed)."""

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner

from models.headroom import ShardShape
from models.policy import Policy
from models.resources import Resources
from models.snapshot import Snapshot
from placer.cli import main
from solver.headroom import headroom
from solver.solve import SolveOptions, solve
from tests.kube_dicts import node, redis_pod, snapshot

GI = 2**30


def shape(size: int, memory_gi: int = 1, cpu: int = 100, cluster: str = "redis/new") -> ShardShape:
    return ShardShape(
        size=size, requests=Resources(cpu=cpu, memory=memory_gi * GI), cluster=cluster
    )


def policy(**rules: Any) -> Policy:
    return Policy.model_validate({"rules": rules, "solver": {"timeLimitSeconds": 20}})


def with_pending(
    nodes: list[dict[str, Any]], running: list[dict[str, Any]], s: ShardShape, shards: int
) -> Snapshot:
    namespace, cluster = s.cluster.split("/")
    pods = [
        redis_pod(
            f"new-{i}-{j}",
            cluster,
            f"new-{i}",
            None,
            cpu=f"{s.requests.cpu}m",
            memory=str(s.requests.memory),
            namespace=namespace,
        )
        for i in range(shards)
        for j in range(s.size)
    ]
    return snapshot(nodes, [*running, *pods])


def confirm(
    nodes: list[dict[str, Any]], running: list[dict[str, Any]], s: ShardShape, p: Policy, n: int
) -> None:
    """n more shards are placed whole, breaking no hard rule; n + 1 are not all placed."""
    options = SolveOptions(time_limit=20, explain=False)
    fits = solve(with_pending(nodes, running, s, n), p, "place", options)
    new = [v for v in fits.hard_violations if any("/new-" in pod for pod in v.pods)]
    assert fits.unplaced == [] and new == [], (fits.unplaced, new)
    over = solve(with_pending(nodes, running, s, n + 1), p, "place", options)
    assert over.unplaced, f"{n + 1} shards were all placed"


def three_nodes(c_memory: str = "4Gi") -> list[dict[str, Any]]:
    """One node per zone; zone-c's is small."""
    return [
        node("a", "zone-a", "ra", cpu="16", memory="32Gi"),
        node("b", "zone-b", "rb", cpu="16", memory="32Gi"),
        node("c", "zone-c", "rc", cpu="16", memory=c_memory),
    ]


def test_memory_in_zone_c_binds_a_shard_across_three_hosts() -> None:
    """Every 3-member shard needs a member on each of the 3 nodes: c holds 4 of 1Gi."""
    nodes, s, p = three_nodes(), shape(3), policy(maxMastersPerNode=2)
    answer = headroom(snapshot(nodes, []), p, s)
    assert (answer.shards, answer.status, answer.bound) == (4, "OPTIMAL", 4)
    assert answer.limited_by == "memory in zone-c"
    assert answer.to_json_dict()["limitedBy"] == "memory in zone-c"
    confirm(nodes, [], s, p, 4)


def test_survive_zone_needs_a_master_majority_outside_every_zone() -> None:
    """With 3 zones, 4 masters put 2 in one zone: losing it leaves 2 of 4, no majority. 3 fit."""
    nodes, s, p = three_nodes(), shape(3), policy(maxMastersPerNode=2, survive="zone")
    answer = headroom(snapshot(nodes, []), p, s)
    assert (answer.shards, answer.status) == (3, "OPTIMAL")
    assert answer.limited_by == "survive zone: master majority"
    confirm(nodes, [], s, p, 3)


def six_nodes() -> list[dict[str, Any]]:
    return [
        node(f"n{i}", f"zone-{'abc'[i % 3]}", f"r{i}", cpu="16", memory="10Gi") for i in range(6)
    ]


def test_memory_everywhere_and_master_slots() -> None:
    """6 nodes x 3 members of 3Gi = 18 members = 9 shards of 2; with 1 master a node, 6."""
    nodes, s = six_nodes(), shape(2, memory_gi=3)
    roomy = policy(maxMastersPerNode=10)
    answer = headroom(snapshot(nodes, []), roomy, s)
    assert (answer.shards, answer.status, answer.limited_by) == (9, "OPTIMAL", "memory")
    confirm(nodes, [], s, roomy, 9)
    strict = policy(maxMastersPerNode=1)
    answer = headroom(snapshot(nodes, []), strict, s)
    assert (answer.shards, answer.status) == (6, "OPTIMAL")
    assert answer.limited_by == "master slots (maxMastersPerNode 1)"
    assert [b.shards for b in answer.bounds][:2] == [6, 9]
    confirm(nodes, [], s, strict, 6)


def test_running_pods_take_their_room_and_pending_ones_are_left_out() -> None:
    nodes, s, p = three_nodes(), shape(3), policy(maxMastersPerNode=2)
    running = [
        redis_pod("old-0-0", "old", 0, "master", node="c", memory="1Gi", namespace="redis"),
        redis_pod("old-0-1", "old", 0, "replica", node="a", memory="1Gi", namespace="redis"),
    ]
    pending = [redis_pod("wait-0-0", "wait", 0, None, memory="1Gi")]
    answer = headroom(snapshot(nodes, [*running, *pending]), p, s)
    assert (answer.shards, answer.status, answer.limited_by) == (3, "OPTIMAL", "memory in zone-c")
    assert answer.pending_ignored == ["default/wait-0-0"]
    confirm(nodes, running, s, p, 3)


def test_the_rules_together_stop_it_below_every_capacity_bound() -> None:
    """Zone separation required, 3 members on 3 hosts, 2 of them in zone-a: every master must
    sit on the one zone-b node, which takes one master. Capacity alone allows 3."""
    nodes = [
        node("a1", "zone-a", "ra", cpu="16", memory="32Gi"),
        node("a2", "zone-a", "ra", cpu="16", memory="32Gi"),
        node("b1", "zone-b", "rb", cpu="16", memory="32Gi"),
    ]
    p = Policy.model_validate(
        {
            "rules": {"replicaSeparation": {"zone": "required"}},
            "degradation": {"relaxWhenInfeasible": False},
        }
    )
    s = shape(3)
    answer = headroom(snapshot(nodes, []), p, s)
    assert (answer.shards, answer.status) == (1, "OPTIMAL")
    assert answer.bounds[0].shards == 3 and answer.bound == 1
    assert "replica-separation" in answer.limited_by, answer.limited_by
    assert answer.explanation
    confirm(nodes, [], s, p, 1)


def test_nothing_fits_is_proven_without_a_solve() -> None:
    nodes = [node("a", "zone-a", "ra"), node("b", "zone-b", "rb")]  # 2 hosts, shard of 3
    answer = headroom(snapshot(nodes, []), policy(), shape(3))
    assert (answer.shards, answer.status, answer.bound, answer.candidates) == (0, "OPTIMAL", 0, 0)
    assert answer.limited_by == (
        "shard-spread: a shard of 3 members needs 3 distinct hosts; 2 hosts accept its pods"
    )
    full = headroom(snapshot(three_nodes(), []), policy(), shape(3, memory_gi=40))
    assert (full.shards, full.limited_by) == (
        0,
        "memory: no node has room for one member (3 nodes accept its pods)",
    )


@pytest.mark.parametrize(("cluster", "expected"), [("redis/cache", 12), ("redis/other", 0)])
def test_joining_an_existing_cluster_counts_its_masters(cluster: str, expected: int) -> None:
    """zone-c is full, but cache already has its master there: new cache shards may split their
    masters evenly between zone-a and zone-b (2 x 6 of 13, each loss leaves a majority), up to
    the 12 master slots. A new cluster has only two zones for its masters: none can survive."""
    nodes = [
        node(f"{z}{i}", f"zone-{z}", f"r{z}", cpu="16", memory="64Gi")
        for z in "ab"
        for i in range(2)
    ]
    nodes.append(node("c0", "zone-c", "rc", cpu="16", memory="1Gi"))
    running = [
        redis_pod("cache-0-0", "cache", 0, "master", node="c0", namespace="redis"),
        redis_pod("cache-0-1", "cache", 0, "replica", node="a0", namespace="redis"),
    ]
    p = policy(maxMastersPerNode=3, survive="zone")
    s = shape(2, cluster=cluster)
    answer = headroom(snapshot(nodes, running), p, s)
    assert (answer.shards, answer.status) == (expected, "OPTIMAL")
    if expected:
        assert answer.limited_by == "master slots (maxMastersPerNode 3)"
    else:
        assert answer.limited_by == "survive zone: master majority"
    confirm(nodes, running, s, p, expected)


def test_a_bound_beyond_the_candidates_tried_is_feasible_not_proven(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr("solver.headroom.MAX_CANDIDATES", 4)
    answer = headroom(snapshot(six_nodes(), []), policy(maxMastersPerNode=10), shape(2, 3))
    assert (answer.shards, answer.status, answer.bound, answer.candidates) == (4, "FEASIBLE", 9, 4)
    assert "4 candidate shards were tried" in answer.note


# -- the command ---------------------------------------------------------------------------


def write_dump(tmp_path: Path, objects: list[dict[str, Any]]) -> str:
    path = tmp_path / "dump.yaml"
    path.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": objects}))
    return str(path)


def run(args: list[str]) -> Any:
    return CliRunner().invoke(main, ["headroom", *args])


def test_headroom_json_contract(tmp_path: Path) -> None:
    dump = write_dump(tmp_path, three_nodes())
    policy_file = tmp_path / "policy.yaml"
    policy_file.write_text("rules: {maxMastersPerNode: 2}\n")
    args = ["-f", dump, "-p", str(policy_file), "--shard-size", "3", "--cpu", "100m"]
    result = run([*args, "--memory", "1Gi", "-o", "json"])
    assert result.exit_code == 0, result.output
    answer = json.loads(result.stdout)
    assert {k: answer[k] for k in ("shards", "status", "limitedBy")} == {
        "shards": 4,
        "status": "OPTIMAL",
        "limitedBy": "memory in zone-c",
    }
    assert answer["bound"] == 4 and answer["cluster"] == "default/headroom"
    assert answer["memoryBytes"] == GI and answer["cpuMillis"] == 100
    table = run([*args, "--memory", "1Gi"])
    assert "headroom: 4 more shards of 3 x (100m cpu, 1Gi memory)" in table.stdout
    assert "status OPTIMAL (proven: no more than 4 fit)" in table.stdout
    assert "limited by: memory in zone-c" in table.stdout


def test_headroom_copies_an_existing_clusters_pods(tmp_path: Path) -> None:
    running = [
        redis_pod("big-0-0", "big", 0, "master", node="a", memory="2Gi"),
        redis_pod("big-0-1", "big", 0, "replica", node="c", memory="2Gi"),
    ]
    dump = write_dump(tmp_path, [*three_nodes(c_memory="8Gi"), *running])
    policy_file = tmp_path / "policy.yaml"
    policy_file.write_text("rules: {maxMastersPerNode: 2}\n")
    result = run(
        [
            "-f",
            dump,
            "-p",
            str(policy_file),
            "--shard-size",
            "3",
            "--cluster",
            "default/big",
            "-o",
            "json",
        ]
    )
    assert result.exit_code == 0, result.output
    answer = json.loads(result.stdout)
    # c: 8Gi - 2Gi used = 3 members of 2Gi.
    assert (answer["shards"], answer["memoryBytes"], answer["limitedBy"]) == (
        3,
        2 * GI,
        "memory in zone-c",
    )


def test_headroom_bad_input_is_one_line_exit_2(tmp_path: Path) -> None:
    dump = write_dump(tmp_path, three_nodes())
    (tmp_path / "empty").mkdir()
    empty = write_dump(tmp_path / "empty", [])
    cases = [
        (["-f", dump, "--shard-size", "3"], "give --cpu and --memory"),
        (["-f", dump, "--shard-size", "3", "--cpu", "1x", "--memory", "1Gi"], "not a quantity"),
        (
            ["-f", dump, "--shard-size", "3", "--cluster", "nons"],
            "--cluster: nons: must be NAMESPACE/NAME",
        ),
        (
            ["-f", dump, "--shard-size", "3", "--cluster", "a/b", "--memory", "1Gi"],
            "Redis cluster a/b is not in the input",
        ),
        (["-f", empty, "--shard-size", "3", "--cpu", "1", "--memory", "1Gi"], "nothing to judge"),
    ]
    for args, message in cases:
        result = run(args)
        assert result.exit_code == 2, (args, result.output)
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1 and message in lines[0], (args, result.stderr)
    missing = run(["-f", dump, "--cpu", "1", "--memory", "1Gi"])
    assert missing.exit_code == 2 and "--shard-size" in missing.stderr


def test_headroom_help() -> None:
    result = CliRunner().invoke(main, ["headroom", "--help"])
    assert result.exit_code == 0
    for option in ("--shard-size", "--cpu", "--memory", "--cluster", "--time-limit"):
        assert option in result.stdout


# -- what the command says at the edges: bad requests, no request, nothing fits, no node --------


def table(tmp_path: Path, objects: list[dict[str, Any]], *args: str) -> Any:
    """The table answer for a dump of ``objects``; ``--allow-empty`` lets an empty one through."""
    result = run(["-f", write_dump(tmp_path, objects), "--allow-empty", *args])
    assert result.exit_code == 0, result.output
    return result.stdout


@pytest.mark.parametrize(
    ("flags", "flag", "value"),
    [
        (["--cpu", "-1", "--memory", "1Gi"], "--cpu", "'-1'"),
        (["--cpu", "-500m", "--memory", "1Gi"], "--cpu", "'-500m'"),
        (["--cpu", "100m", "--memory", "-1Gi"], "--memory", "'-1Gi'"),
        (["--cpu", "100m", "--memory", "-1"], "--memory", "'-1'"),
    ],
)
def test_a_negative_request_is_refused_naming_its_flag(
    tmp_path: Path, flags: list[str], flag: str, value: str
) -> None:
    """As the snapshot refuses a pod's negative request: one line naming the flag, exit 2."""
    result = run(["-f", write_dump(tmp_path, three_nodes()), "--shard-size", "2", *flags])
    assert result.exit_code == 2, result.output
    assert result.stdout == ""
    assert result.stderr.splitlines() == [
        f"error: {flag}: {value} is negative: Kubernetes accepts no negative quantity"
    ]


def test_a_resource_not_requested_bounds_nothing() -> None:
    """A shape asking no cpu (or no memory) has no bound from it, not a sentinel count."""
    answer = headroom(snapshot(three_nodes(), []), policy(), shape(3, cpu=0))
    by_limit = {b.limit: b.shards for b in answer.bounds}
    assert by_limit["cpu"] is None and by_limit["memory"] == 4
    assert answer.bounds[-1].limit == "cpu"  # unbounded sorts last
    both = headroom(snapshot(three_nodes(), []), policy(), shape(3, memory_gi=0, cpu=0))
    assert [b.shards for b in both.bounds if b.limit in ("cpu", "memory")] == [None, None]
    assert all(b.shards is None or b.shards < 1000 for b in both.bounds)


def test_the_table_shows_an_unrequested_resource_as_unbounded(tmp_path: Path) -> None:
    out = table(tmp_path, three_nodes(), "--shard-size", "2", "--cpu", "0", "--memory", "0")
    assert str(1 << 40) not in out
    rows = {line.split("  ")[0]: line for line in out.splitlines()}
    assert "unbounded" in rows["cpu"] and "unbounded" in rows["memory"]


@pytest.mark.parametrize(
    ("args", "limited_by"),
    [
        (
            ["--shard-size", "2", "--cpu", "100", "--memory", "1Ti"],
            "memory and cpu: no node has room for one member (3 nodes accept its pods)",
        ),
        (
            ["--shard-size", "1000000", "--cpu", "100m", "--memory", "1Gi"],
            "shard-spread: a shard of 1000000 members needs 1000000 distinct hosts; "
            "3 hosts accept its pods",
        ),
    ],
)
def test_when_no_shard_fits_it_says_so_and_why(
    tmp_path: Path, args: list[str], limited_by: str
) -> None:
    out = table(tmp_path, three_nodes(), *args)
    first, status, limit, survival = out.splitlines()[:4]
    assert first.startswith("headroom: no shard of ") and first.endswith(
        " fits for Redis cluster default/headroom"
    )
    assert status.startswith("status OPTIMAL (proven: none fits)")
    assert limit == f"limited by: {limited_by}"
    assert survival == (
        "survival: not judged: default/headroom would have no shard (none runs and none is added)"
    )
    assert "-1" not in out and "0 masters" not in out


@pytest.mark.parametrize(
    ("nodes", "limited_by"),
    [
        (
            [node(n, f"zone-{n}", f"r{n}", ready=False) for n in "abc"],
            "0/3 nodes are available: 3 node not Ready",
        ),
        (
            [
                node("a", "zone-a", "ra", unschedulable=True),
                node("b", "zone-b", "rb", unschedulable=True),
                node("c", "zone-c", "rc", ready=False),
            ],
            "0/3 nodes are available: 2 node unschedulable, 1 node not Ready",
        ),
        (
            [node(n, f"zone-{n}", f"r{n}", taints=["dedicated=db:NoSchedule"]) for n in "ab"],
            "0/2 nodes are available: 2 untolerated taint dedicated",
        ),
        ([], "the input has no nodes"),
    ],
)
def test_no_node_accepting_new_pods_is_said_not_a_resource_or_host_limit(
    tmp_path: Path, nodes: list[dict[str, Any]], limited_by: str
) -> None:
    out = table(tmp_path, nodes, "--shard-size", "2", "--cpu", "100m", "--memory", "1Gi")
    assert f"limited by: no node accepts its pods: {limited_by}\n" in out
    assert "limited by: memory" not in out and "in one host" not in out


def test_counts_of_one_are_singular(tmp_path: Path) -> None:
    """One shard fits (zone-c holds one member of 4Gi), one pending pod is left out."""
    pending = redis_pod("wait-0-0", "wait", 0, None, memory="1Gi")
    out = table(
        tmp_path, [*three_nodes(), pending], "--shard-size", "3", "--cpu", "1", "--memory", "4Gi"
    )
    assert out.startswith("headroom: 1 more shard of 3 x (1000m cpu, 4Gi memory)")
    assert "no more than 1 fits);" in out and "1 candidate shard solved in" in out
    assert "left out: 1 pending pod of the input" in out
    assert "(s)" not in out
