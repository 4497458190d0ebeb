"""The failure drill (solver/drill.py and ``redis-placer drill``) on small clusters whose
outcome is known by hand."""

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner

from models.errors import InputError
from models.policy import Policy
from models.snapshot import Snapshot
from placer.cli import main
from solver.drill import drill, every_domain, resolve_outage
from solver.solve import SolveOptions, solve
from tests.kube_dicts import node, redis_pod, snapshot


def three_zone_objects() -> list[dict[str, Any]]:
    """Redis cluster ``cache``: masters of shards 0 and 1 in zone-a, shard 2's in zone-c.

    a1: M cache/0, r cache/2    a2: M cache/1    b1: r cache/0    c1: r cache/1, M cache/2
    """
    nodes = [node("a1", "zone-a", "ra"), node("a2", "zone-a", "ra")]
    nodes += [node("b1", "zone-b", "rb"), node("c1", "zone-c", "rc")]
    pods = [
        redis_pod("cache-0-0", "cache", 0, "master", node="a1"),
        redis_pod("cache-0-1", "cache", 0, "replica", node="b1"),
        redis_pod("cache-1-0", "cache", 1, "master", node="a2"),
        redis_pod("cache-1-1", "cache", 1, "replica", node="c1"),
        redis_pod("cache-2-0", "cache", 2, "master", node="c1"),
        redis_pod("cache-2-1", "cache", 2, "replica", node="a1"),
    ]
    return [*nodes, *pods]


def three_zones() -> Snapshot:
    """``three_zone_objects`` plus Redis cluster ``web`` (one shard) in zone-b and zone-c."""
    web = [
        redis_pod("web-0-0", "web", 0, "master", node="b1"),
        redis_pod("web-0-1", "web", 0, "replica", node="c1"),
    ]
    objects = three_zone_objects()
    return snapshot([o for o in objects if o["kind"] == "Node"], [*objects[4:], *web])


def test_losing_zone_a_takes_two_of_three_masters_and_the_majority() -> None:
    snap = three_zones()
    report = drill(snap, [resolve_outage(snap, [("zone", "zone-a")])])
    (failure,) = report.failures
    assert (failure.level, failure.domain, failure.nodes_lost) == ("zone", "zone-a", ["a1", "a2"])
    (cache,) = failure.clusters  # web has no member in zone-a
    assert cache.cluster == "default/cache"
    assert (cache.masters_lost, cache.masters, cache.majority_kept) == (2, 3, False)
    assert cache.shards_lost == 0  # every shard keeps a member ...
    assert cache.promotions == []  # ... but with 1 of 3 masters left no failover is authorized
    assert cache.unavailable_shards == ["0", "1"]
    assert cache.state == "fail"
    assert cache.masters_per_zone == {"zone-c": 1}
    assert cache.slots_unavailable is None and report.slots == "not read"
    reasons = {s.shard: (s.members_left, s.master_lost, s.reason) for s in cache.affected_shards}
    assert reasons == {
        "0": (1, True, "master lost; no master majority left to authorize a failover"),
        "1": (1, True, "master lost; no master majority left to authorize a failover"),
        "2": (1, False, ""),
    }
    assert failure.loses_data_or_majority


def test_losing_zone_c_promotes_the_reachable_replica() -> None:
    snap = three_zones()
    report = drill(snap, [resolve_outage(snap, [("zone", "zone-c")])])
    (failure,) = report.failures
    cache, web = failure.clusters
    assert (cache.masters_lost, cache.majority_kept, cache.state) == (1, True, "ok")
    assert [(p.shard, p.from_, p.to) for p in cache.promotions] == [
        ("2", "default/cache-2-0", "default/cache-2-1")
    ]
    assert cache.masters_per_zone == {"zone-a": 3}
    assert (web.masters_lost, web.majority_kept, web.state, web.promotions) == (0, True, "ok", [])
    assert not failure.loses_data_or_majority


def test_every_zone_in_turn_worst_first() -> None:
    snap = three_zones()
    outages = every_domain(snap, None, "zone")
    assert [o[0].domain for o in outages] == ["zone-a", "zone-b", "zone-c"]
    report = drill(snap, outages)
    # zone-b holds web's only master: a one-master cluster has no majority left to promote.
    assert [f.domain for f in report.failures] == ["zone-a", "zone-b", "zone-c"]
    assert [f.loses_data_or_majority for f in report.failures] == [True, True, False]
    web = report.failures[1].clusters[1]
    assert (web.cluster, web.masters_lost, web.majority_kept) == ("default/web", 1, False)
    assert web.unavailable_shards == ["0"]


def test_a_shard_inside_the_lost_domain_is_lost() -> None:
    nodes = [node(n, z, z) for n, z in (("a1", "za"), ("a2", "za"), ("b1", "zb"), ("c1", "zc"))]
    pods = [
        redis_pod("k-0-0", "k", 0, "master", node="a1"),
        redis_pod("k-0-1", "k", 0, "replica", node="a2"),
        redis_pod("k-1-0", "k", 1, "master", node="b1"),
        redis_pod("k-1-1", "k", 1, "replica", node="c1"),
        redis_pod("k-2-0", "k", 2, "master", node="c1"),
        redis_pod("k-2-1", "k", 2, "replica", node="b1"),
    ]
    snap = snapshot(nodes, pods)
    (failure,) = drill(snap, [resolve_outage(snap, [("zone", "za")])]).failures
    (k,) = failure.clusters
    assert (k.masters_lost, k.majority_kept, k.shards_lost, k.unavailable_shards) == (
        1,
        True,
        1,
        ["0"],
    )
    assert k.affected_shards[0].reason == "no member left"
    assert failure.loses_data_or_majority


def replicated_twice() -> Snapshot:
    nodes = [node(n, f"z{n}", f"r{n}") for n in ("0", "1", "2", "3")]
    pods = [
        redis_pod("s-0-a", "s", 0, "master", node="0"),
        redis_pod("s-0-b", "s", 0, "replica", node="1"),
        redis_pod("s-0-c", "s", 0, "replica", node="2"),
        redis_pod("s-1-a", "s", 1, "master", node="1"),
        redis_pod("s-1-b", "s", 1, "replica", node="3"),
        redis_pod("s-2-a", "s", 2, "master", node="2"),
        redis_pod("s-2-b", "s", 2, "replica", node="3"),
    ]
    return snapshot(nodes, pods)


def test_promotion_goes_by_name_without_offsets_and_by_offset_with_them() -> None:
    snap = replicated_twice()
    outage = [resolve_outage(snap, [("host", "0")])]
    by_name = drill(snap, outage)
    assert [p.to for p in by_name.failures[0].clusters[0].promotions] == ["default/s-0-b"]
    assert "first by pod name" in by_name.promotion_rule
    offsets = {"default/s-0-b": 100, "default/s-0-c": 250}
    slots = {"default/s-0-a": 5000, "default/s-1-a": 6000, "default/s-2-a": 5384}
    by_offset = drill(snap, outage, offsets=offsets, slots=slots, roles="redis")
    (promotion,) = by_offset.failures[0].clusters[0].promotions
    assert (promotion.to, promotion.offset) == ("default/s-0-c", 250)
    assert "highest replication offset" in by_offset.promotion_rule
    assert by_offset.slots == "redis" and by_offset.failures[0].clusters[0].slots_unavailable == 0


def test_slots_of_unavailable_shards_are_counted() -> None:
    snap = replicated_twice()
    slots = {"default/s-0-a": 5000, "default/s-1-a": 6000, "default/s-2-a": 5384}
    # Hosts 1 and 2 together: two of three masters gone, no failover for shards 1 and 2.
    outage = resolve_outage(snap, [("host", "1"), ("host", "2")])
    (failure,) = drill(snap, [outage], slots=slots).failures
    assert (failure.level, failure.domain) == ("host+host", "1+2")
    (s,) = failure.clusters
    assert s.unavailable_shards == ["1", "2"] and s.slots_unavailable == 11384
    assert not s.majority_kept and s.state == "fail"


def test_a_plans_placement_can_be_drilled() -> None:
    nodes = [node(f"n{i}", f"zone-{'abc'[i % 3]}", f"r{i}") for i in range(6)]
    pods = [redis_pod(f"p-{s}-{m}", "p", s, None) for s in range(3) for m in range(2)]
    snap = snapshot(nodes, pods)
    policy = Policy.model_validate({"rules": {"survive": "zone"}})
    plan = solve(snap, policy, "place", SolveOptions(time_limit=5))
    assert not plan.unplaced
    running = drill(snap, every_domain(snap, None, "zone"))
    assert running.failures == [] and len(running.left_out) == 6 and running.members == 0
    planned = drill(snap, every_domain(snap, plan, "zone"), plan)
    assert planned.placement == "plan" and planned.members == 6 and planned.left_out == []
    assert len(planned.failures) == 3
    assert not any(f.loses_data_or_majority for f in planned.failures)


def test_unknown_domains_and_levels_are_input_errors() -> None:
    snap = three_zones()
    with pytest.raises(InputError, match=r"no node is in zone 'zone-x' \(known: zone-a, zone-b"):
        resolve_outage(snap, [("zone", "zone-x")])
    with pytest.raises(InputError, match="unknown level 'region'"):
        resolve_outage(snap, [("region", "eu")])
    assert resolve_outage(snap, [("host", "a1")])[0].domain == "a1"


# -- the command ---------------------------------------------------------------------------


def write_dump(tmp_path: Path, objects: list[dict[str, Any]], name: str = "dump.yaml") -> str:
    path = tmp_path / name
    path.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": objects}))
    return str(path)


def run(args: list[str], stdin: str | None = None) -> Any:
    return CliRunner().invoke(main, ["drill", *args], input=stdin)


def test_drill_json_contract_and_exit_1_when_zone_a_takes_the_majority(tmp_path: Path) -> None:
    dump = write_dump(tmp_path, three_zone_objects())
    result = run(["-f", dump, "-o", "json"])
    assert result.exit_code == 1, result.output
    report = json.loads(result.stdout)
    first = report["failures"][0]
    assert (first["level"], first["domain"]) == ("zone", "zone-a")
    (cache,) = first["clusters"]
    assert {k: cache[k] for k in ("cluster", "mastersLost", "masters", "majorityKept")} == {
        "cluster": "default/cache",
        "mastersLost": 2,
        "masters": 3,
        "majorityKept": False,
    }
    assert cache["shardsLost"] == 0 and cache["promotions"] == []
    assert cache["unavailableShards"] == ["0", "1"] and cache["state"] == "fail"
    zone_c = next(f for f in report["failures"] if f["domain"] == "zone-c")
    assert zone_c["clusters"][0]["promotions"] == [
        {"shard": "2", "from": "default/cache-2-0", "to": "default/cache-2-1", "offset": None}
    ]
    assert zone_c["clusters"][0]["mastersPerZone"] == {"zone-a": 3}
    assert [f["domain"] for f in report["failures"]] == ["zone-a", "zone-c", "zone-b"]


def test_drill_table_names_the_loss_and_the_promotion(tmp_path: Path) -> None:
    dump = write_dump(tmp_path, three_zone_objects())
    result = run(["-f", dump])
    assert result.exit_code == 1
    out = result.stdout
    assert "zone zone-a (2 nodes: a1, a2): LOSES default/cache" in out
    assert "default/cache  2 of 3        LOST" in out
    assert "down    default/cache shard 0: master lost; no master majority left" in out
    assert "promote default/cache shard 2: default/cache-2-1 replaces default/cache-2-0" in out
    assert "slots: not read (pass --roles redis)" in out
    assert "verdict: 1 of 3 zone failures lose a shard or a master majority" in out


def test_drill_one_named_failure_that_survives_exits_0(tmp_path: Path) -> None:
    dump = write_dump(tmp_path, three_zone_objects())
    result = run(["-f", dump, "--fail", "zone=zone-c", "-o", "json"])
    assert result.exit_code == 0, result.output
    (failure,) = json.loads(result.stdout)["failures"]
    assert failure["domain"] == "zone-c" and failure["clusters"][0]["majorityKept"]
    # a1 and c1 together: masters of shards 0 and 2, and both members of shard 2.
    both = run(["-f", dump, "--fail", "host=a1,host=c1", "-o", "json"])
    assert both.exit_code == 1
    (together,) = json.loads(both.stdout)["failures"]
    assert (together["level"], together["domain"]) == ("host+host", "a1+c1")
    (cache,) = together["clusters"]
    assert (cache["mastersLost"], cache["majorityKept"], cache["shardsLost"]) == (2, False, 1)
    two = run(["-f", dump, "--fail", "zone=zone-b", "--fail", "zone=zone-c", "-o", "json"])
    assert two.exit_code == 0
    assert [f["domain"] for f in json.loads(two.stdout)["failures"]] == ["zone-c", "zone-b"]


def test_drill_level_and_policy_survive(tmp_path: Path) -> None:
    dump = write_dump(tmp_path, three_zone_objects())
    hosts = run(["-f", dump, "--level", "host", "-o", "json"])
    assert [f["level"] for f in json.loads(hosts.stdout)["failures"]] == ["host"] * 4
    policy = tmp_path / "policy.yaml"
    policy.write_text("rules: {survive: rack}\n")
    racks = run(["-f", dump, "-p", str(policy), "-o", "json"])
    assert {f["level"] for f in json.loads(racks.stdout)["failures"]} == {"rack"}


def test_drill_a_plan_file(tmp_path: Path) -> None:
    objects = [node(f"n{i}", f"zone-{'abc'[i % 3]}", f"r{i}") for i in range(6)]
    objects += [redis_pod(f"p-{s}-{m}", "p", s, None) for s in range(3) for m in range(2)]
    dump = write_dump(tmp_path, objects)
    policy = tmp_path / "policy.yaml"
    policy.write_text("rules: {survive: zone}\n")
    nothing = run(["-f", dump, "-p", str(policy)])
    assert nothing.exit_code == 2 and nothing.stdout == ""
    assert nothing.stderr == (
        "error: nothing to drill: no Redis pod has a node (6 pending or unplaced; pass --plan "
        "to drill a plan); pass --allow-empty to accept it\n"
    )
    accepted = run(["-f", dump, "-p", str(policy), "--allow-empty"])
    assert accepted.exit_code == 0, accepted.output
    assert "not drilled: 6 pod(s) with no node (pass --plan to drill a plan)" in accepted.stdout
    assert "verdict: nothing drilled: no zone holds a Redis pod" in accepted.stdout
    planned = CliRunner().invoke(main, ["plan", "-f", dump, "-p", str(policy), "-o", "json"])
    assert planned.exit_code == 0, planned.output
    plan_file = tmp_path / "plan.json"
    plan_file.write_text(planned.stdout)
    result = run(["-f", dump, "-p", str(policy), "--plan", str(plan_file), "-o", "json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["placement"] == "plan" and report["members"] == 6
    assert len(report["failures"]) == 3
    from_stdin = run(["-f", dump, "-p", str(policy), "--plan", "-"], stdin=planned.stdout)
    assert from_stdin.exit_code == 0 and "drill of a plan's placement: 6 Redis pods" in (
        from_stdin.stdout
    )


def test_drill_with_no_domain_holding_a_pod_has_nothing_to_drill(tmp_path: Path) -> None:
    """The Redis pods run on a node without a zone label (a warning): no zone failure touches
    them, which is nothing to drill, not a drill that every zone survives."""
    bare = node("x1", "zone-x", "rx")
    del bare["metadata"]["labels"]["topology.kubernetes.io/zone"]
    pods = [redis_pod("k-0-0", "k", 0, "master", node="x1")]
    dump = write_dump(tmp_path, [node("a1", "zone-a", "ra"), bare, *pods])
    result = run(["-f", dump])
    assert result.exit_code == 2 and result.stdout == ""
    assert result.stderr.splitlines()[0] == (
        "error: nothing to drill: no zone holds a Redis pod (the nodes they run on have no "
        "zone label); pass --allow-empty to accept it"
    )
    accepted = run(["-f", dump, "--allow-empty"])
    assert accepted.exit_code == 0, accepted.output
    assert "verdict: nothing drilled: no zone holds a Redis pod" in accepted.stdout
    assert "every one of" not in accepted.stdout
    assert "warning: node x1" in accepted.stderr
    hosts = run(["-f", dump, "--level", "host", "-o", "json"])
    assert [f["domain"] for f in json.loads(hosts.stdout)["failures"]] == ["x1"]


def test_drill_bad_input_is_one_line_exit_2(tmp_path: Path) -> None:
    dump = write_dump(tmp_path, three_zone_objects())
    cases = [
        (["--fail", "zone=zone-x"], "error: --fail: zone: no node is in zone 'zone-x' (known:"),
        (["--fail", "zone"], "error: --fail: 'zone' is not LEVEL=DOMAIN (e.g. zone=zone-a)"),
        (["--fail", "region=eu"], "error: --fail: region: unknown level 'region'"),
        (["--plan", str(tmp_path / "missing.json")], "cannot read"),
    ]
    bad_plan = tmp_path / "bad.json"
    bad_plan.write_text(json.dumps({"status": "MAYBE"}))
    cases.append((["--plan", str(bad_plan)], "error: plan " + str(bad_plan) + ": status: Input"))
    other = tmp_path / "other.json"
    other.write_text(
        json.dumps(
            {
                "status": "OPTIMAL",
                "assignments": [
                    {
                        "pod": "x/y",
                        "node": "a1",
                        "role": "master",
                        "cluster": "x/c",
                        "shard": "0",
                        "action": "place",
                    }
                ],
            }
        )
    )
    cases.append((["--plan", str(other)], "none of its pods is in the snapshot"))
    for args, message in cases:
        result = run(["-f", dump, *args])
        assert result.exit_code == 2, (args, result.output)
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1 and message in lines[0], (args, result.stderr)
        assert result.stdout == ""


def test_drill_map_marks_the_lost_nodes(tmp_path: Path) -> None:
    dump = write_dump(tmp_path, three_zone_objects())
    result = run(["-f", dump, "-o", "map"])
    assert result.exit_code == 1
    lines = result.stdout.splitlines()
    assert "== zone zone-a lost ==" in lines
    a1 = next(line for line in lines if line.strip().startswith("a1 "))
    assert "M:cache/0 r:cache/2" in a1 and a1.endswith("[down]")
    c1 = next(line for line in lines if line.strip().startswith("c1 "))
    assert "[down]" not in c1


def test_drill_help_names_every_option() -> None:
    result = CliRunner().invoke(main, ["drill", "--help"])
    assert result.exit_code == 0
    for option in ("--fail", "--level", "--plan", "--roles", "-o, --output"):
        assert option in result.stdout


def _plan_file(tmp_path: Path, moves: list[tuple[str, str]], name: str = "plan.json") -> str:
    """A plan of cache pods (``moves``: pod name -> node) as ``plan -o json`` writes one."""
    assignments = [
        {
            "pod": f"default/{pod}",
            "node": node_name,
            "role": "master" if pod.endswith("-0") else "replica",
            "cluster": "default/cache",
            "shard": pod.split("-")[1],
            "action": "move",
        }
        for pod, node_name in moves
    ]
    path = tmp_path / name
    path.write_text(json.dumps({"status": "OPTIMAL", "assignments": assignments}))
    return str(path)


def test_drill_refuses_a_plan_that_names_nodes_the_snapshot_lacks(tmp_path: Path) -> None:
    """A plan made for another cluster: its placement cannot happen here, so no verdict on it."""
    dump = write_dump(tmp_path, three_zone_objects())
    plan = _plan_file(
        tmp_path, [("cache-0-0", "a1"), ("cache-0-1", "node-b3"), ("cache-1-1", "node-a3")]
    )
    result = run(["-f", dump, "--plan", plan])
    assert result.exit_code == 2, result.output
    assert result.stdout == ""
    assert result.stderr == (
        f"error: plan {plan}: assigns default/cache-0-1 to node node-b3, which is not in the "
        "snapshot (and 1 more)\n"
    )


def test_drill_accepts_a_plan_keeping_a_pod_on_the_gone_node_the_snapshot_binds_it_to(
    tmp_path: Path,
) -> None:
    """``plan`` keeps a pod bound to a node missing from the dump where it is: that plan is this
    snapshot's own, and its drill goes on (the pod counted as lost, as the snapshot says)."""
    objects = three_zone_objects()
    objects[5]["spec"]["nodeName"] = "gone"  # cache-0-1, b1's replica
    dump = write_dump(tmp_path, objects)
    planned = CliRunner().invoke(main, ["plan", "-f", dump, "-o", "json"])
    assert {"pod": "default/cache-0-1", "node": "gone"}.items() <= next(
        a for a in json.loads(planned.stdout)["assignments"] if a["pod"] == "default/cache-0-1"
    ).items()
    plan = tmp_path / "plan.json"
    plan.write_text(planned.stdout)
    result = run(["-f", dump, "--plan", str(plan), "-o", "json"])
    assert result.exit_code in (0, 1), result.output
    assert "not in the snapshot: counted as lost" in result.stderr


def test_drill_warns_of_plan_pods_gone_since_and_drills_the_rest(tmp_path: Path) -> None:
    """Pods deleted since the plan was made (a scale-down) are a warning, not an error: the
    plan still places every pod that remains, and that is what is drilled."""
    dump = write_dump(tmp_path, three_zone_objects())
    plan = _plan_file(
        tmp_path,
        [("cache-0-0", "b1"), ("cache-0-1", "a1"), ("cache-3-0", "a2"), ("cache-3-1", "c1")],
    )
    result = run(["-f", dump, "--plan", plan])
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith("drill of a plan's placement: 6 Redis pods")
    assert result.stderr.splitlines() == [
        f"warning: plan {plan}: assigns default/cache-3-0, which is not in the snapshot (and 1 "
        "more): not drilled (deleted since the plan was made?)"
    ]
    document = json.loads(run(["-f", dump, "--plan", plan, "-o", "json"]).stdout)
    assert document["placement"] == "plan" and len(document["warnings"]) == 1


def test_drill_of_a_plan_that_assigns_nothing_says_it_drills_the_running_placement(
    tmp_path: Path,
) -> None:
    """``assignments: []`` leaves every pod where it runs: the drill says it is the running
    placement's and why, never "a plan's placement"."""
    dump = write_dump(tmp_path, three_zone_objects())
    empty = _plan_file(tmp_path, [])
    result = run(["-f", dump, "--plan", empty])
    assert result.exit_code == 1, result.output
    assert result.stdout.splitlines()[0] == (
        "drill of the running placement (the plan assigns no pod, so it moves nothing): "
        "6 Redis pods; roles from labels"
    )
    report = json.loads(run(["-f", dump, "--plan", empty, "-o", "json"]).stdout)
    assert report["placement"] == "running"
    assert report["placementNote"] == "the plan assigns no pod, so it moves nothing"
    kept = _plan_file(tmp_path, [("cache-0-0", "a1"), ("cache-2-1", "a1")], name="kept.json")
    assert run(["-f", dump, "--plan", kept]).stdout.splitlines()[0] == (
        "drill of the running placement (the plan moves no pod and changes no role): "
        "6 Redis pods; roles from labels"
    )
