"""``rebalance --roles redis``: roles read from CLUSTER NODES instead of the role labels.

The pure part (placer.redis.roles.resolve_roles) is tested on exact CLUSTER NODES text;
the command is tested against real redis-server processes whose roles the labels get
wrong (a real CLUSTER FAILOVER the labels never heard of).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
import yaml
from click.testing import CliRunner

from models.cluster import Role
from models.snapshot import Snapshot
from placer.cli import main
from placer.kube.fake import FakeKubeAdapter
from placer.redis.ops import RedisUnreachable, failover_to, parse_cluster_nodes
from placer.redis.roles import View, apply_roles, resolve_roles
from tests.kube_dicts import node, redis_pod, snapshot

if TYPE_CHECKING:  # imported for real by pytest_plugins, so asserts get rewritten
    from tests.redis_harness import RedisClusterHarness

pytest_plugins = ["tests.redis_harness"]

PORT = 6379


# -- pure: CLUSTER NODES text -> roles -----------------------------------------------------

IDS = {ip: f"{ip.rsplit('.', 1)[1]:0>2}" + "f" * 38 for ip in ("10.0.0.1", "10.0.0.2")}
IDS |= {ip: f"{ip.rsplit('.', 1)[1]:0>2}" + "e" * 38 for ip in ("10.0.0.3", "10.0.0.4")}


def pod_obj(name: str, shard: int, role: str | None, ip: str | None, nodename: str) -> Any:
    obj = redis_pod(name, "cache", shard, role, node=nodename)
    if ip:
        obj["status"]["podIP"] = ip
    return obj


def two_shards(
    labels: Mapping[str, str] | None = None, ips: Mapping[str, str | None] | None = None
) -> Snapshot:
    """Shard 0: a (10.0.0.1), b (10.0.0.2); shard 1: c (10.0.0.3), d (10.0.0.4)."""
    labels = {"a": "master", "b": "replica", "c": "master", "d": "replica", **(labels or {})}
    ip = {"a": "10.0.0.1", "b": "10.0.0.2", "c": "10.0.0.3", "d": "10.0.0.4", **(ips or {})}
    shard = {"a": 0, "b": 0, "c": 1, "d": 1}
    nodes = [node(n, z, z) for n, z in (("n1", "za"), ("n2", "zb"))]
    pods = [pod_obj(p, shard[p], labels[p], ip[p], "n1" if p in "ac" else "n2") for p in "abcd"]
    return snapshot(nodes, pods)


def line(ip: str, role: str, master: str | None, *, me: bool = False, extra: str = "") -> str:
    flags = ",".join(f for f in ("myself" if me else "", role, extra) if f)
    master_id = IDS[master] if master else "-"
    return f"{IDS[ip]} {ip}:{PORT}@16379 {flags} {master_id} 0 0 1 connected"


def view(observer: str, layout: Mapping[str, str | None], **extra: str) -> list[Any]:
    """CLUSTER NODES as ``observer`` answers it; ``layout``: ip -> its master's ip (None: master)."""
    text = "\n".join(
        line(
            ip,
            "master" if master is None else "slave",
            master,
            me=ip == observer,
            extra=extra.get(ip.replace(".", "_"), ""),
        )
        for ip, master in layout.items()
    )
    return parse_cluster_nodes(text, observer)


AS_LABELLED = {"10.0.0.1": None, "10.0.0.2": "10.0.0.1", "10.0.0.3": None, "10.0.0.4": "10.0.0.3"}
# Shard 1 failed over behind the labels: d leads, c follows.
SWAPPED = {"10.0.0.1": None, "10.0.0.2": "10.0.0.1", "10.0.0.3": "10.0.0.4", "10.0.0.4": None}
KEY_OF = {"10.0.0.1": "default/a", "10.0.0.2": "default/b", "10.0.0.3": "default/c"}
KEY_OF["10.0.0.4"] = "default/d"
# Six pods a..f on 10.0.1.1..6, for a Redis cluster of two shards of three.
IDS |= {f"10.0.1.{i}": f"1{i}" + "d" * 38 for i in range(1, 7)}
KEY_OF |= {f"10.0.1.{i + 1}": f"default/{p}" for i, p in enumerate("abcdef")}


def all_views(layout: Mapping[str, str | None], **extra: str) -> dict[str, View]:
    return {KEY_OF[ip]: view(ip, layout, **extra) for ip in layout}


def issue_texts(reading: Any) -> list[str]:
    return [f"{i.object}: {i.message}" for i in reading.issues]


def test_failover_behind_the_labels_is_seen() -> None:
    snap = two_shards()
    reading = resolve_roles(snap.members, all_views(SWAPPED), PORT)
    assert [m.message for m in reading.mismatches] == [
        "pod default/c labelled master but Redis says replica",
        "pod default/d labelled replica but Redis says master",
    ]
    assert reading.issues == ()
    assert reading.read == reading.tried == ("default/a", "default/b", "default/c", "default/d")
    fixed = apply_roles(snap, reading)
    assert {m.key: m.role for m in fixed.members} == {
        "default/a": Role.MASTER,
        "default/b": Role.REPLICA,
        "default/c": Role.REPLICA,
        "default/d": Role.MASTER,
    }
    assert {m.key: m.role for m in snap.members}["default/c"] is Role.MASTER  # a new snapshot


def test_labels_that_match_redis_change_nothing() -> None:
    snap = two_shards()
    reading = resolve_roles(snap.members, all_views(AS_LABELLED), PORT)
    assert reading.mismatches == () and reading.issues == ()
    assert apply_roles(snap, reading).members == snap.members


def test_pod_without_ip_keeps_its_label() -> None:
    snap = two_shards(ips={"d": None})
    views = all_views(SWAPPED)
    del views["default/d"]
    reading = resolve_roles(snap.members, views, PORT)
    assert "pod default/d: has no pod IP: its Redis role is unknown; label role kept" in (
        issue_texts(reading)
    )
    # d is reported by its peers at 10.0.0.4, an address no pod has now.
    assert any("matches no managed pod" in t and "10.0.0.4" in t for t in issue_texts(reading))
    # c is trusted as replica; without a visible master shard 1 keeps its labels.
    assert any(
        t.startswith("shard default/cache/1:") and "without a master" in t
        for t in issue_texts(reading)
    )
    assert reading.roles["default/c"] is Role.MASTER and reading.mismatches == ()


def test_unreachable_pod_keeps_its_label_others_are_read() -> None:
    snap = two_shards(labels={"a": "replica", "b": "master"})  # shard 0 labelled backwards
    views = all_views(AS_LABELLED)
    views["default/d"] = RedisUnreachable("10.0.0.4:6379", "unreachable while CLUSTER NODES: x")
    reading = resolve_roles(snap.members, views, PORT)
    assert reading.unreachable == ("default/d",)
    assert (
        "pod default/d: CLUSTER NODES not read (redis 10.0.0.4:6379: unreachable while "
        "CLUSTER NODES: x); label role kept"
    ) in issue_texts(reading)
    assert [m.pod for m in reading.mismatches] == ["default/a", "default/b"]
    assert reading.roles["default/d"] is Role.REPLICA


def test_views_that_disagree_keep_the_label() -> None:
    snap = two_shards()
    views = all_views(SWAPPED)
    views["default/a"] = view("10.0.0.1", AS_LABELLED)  # a has not heard of the failover yet
    reading = resolve_roles(snap.members, views, PORT)
    texts = issue_texts(reading)
    assert (
        "pod default/c: CLUSTER NODES views disagree (master per default/a; replica per "
        "default/b, default/c, default/d); label role kept"
    ) in texts
    assert any(t.startswith("pod default/d: CLUSTER NODES views disagree") for t in texts)
    assert reading.mismatches == ()


@pytest.mark.parametrize("flag", ["fail", "fail?", "handshake", "noaddr"])
def test_flagged_node_is_not_trusted(flag: str) -> None:
    snap = two_shards()
    views = all_views(SWAPPED, **{"10_0_0_3": flag})
    views["default/c"] = view("10.0.0.3", SWAPPED)  # its own view carries no flag
    reading = resolve_roles(snap.members, views, PORT)
    assert any(
        t.startswith(f"pod default/c: flagged {flag} by default/a") and "label role kept" in t
        for t in issue_texts(reading)
    )
    # d is master per Redis; c (labelled master, Redis role untrusted) cannot be a second one.
    assert reading.roles == {
        "default/a": Role.MASTER,
        "default/b": Role.REPLICA,
        "default/c": Role.REPLICA,
        "default/d": Role.MASTER,
    }
    assert any("counted as a replica" in t for t in issue_texts(reading))


def test_dead_master_replaced_by_its_replica() -> None:
    """The classic automatic failover: c died, d took over; c's label still says master."""
    snap = two_shards()
    views = all_views(SWAPPED, **{"10_0_0_3": "fail"})
    views["default/c"] = RedisUnreachable("10.0.0.3:6379", "unreachable while CLUSTER NODES: x")
    reading = resolve_roles(snap.members, views, PORT)
    assert reading.roles["default/d"] is Role.MASTER and reading.roles["default/c"] is Role.REPLICA
    fixed = apply_roles(snap, reading)
    masters = sorted(m.key for m in fixed.members if m.role is Role.MASTER)
    assert masters == ["default/a", "default/d"]
    # c's role is deduced, not read: said so, and never relabelled (confirmed=False).
    assert [(m.pod, m.confirmed) for m in reading.mismatches] == [
        ("default/c", False),
        ("default/d", True),
    ]
    assert reading.mismatches[0].message == (
        "pod default/c labelled master but counted as replica: another pod leads its shard in Redis"
    )


def test_pod_not_joined_to_the_cluster() -> None:
    snap = two_shards()
    views = all_views({k: v for k, v in AS_LABELLED.items() if k != "10.0.0.4"})
    views["default/d"] = view("10.0.0.4", {"10.0.0.4": None})  # a lone, never-joined node
    reading = resolve_roles(snap.members, views, PORT)
    assert any(
        t.startswith("pod default/d: 10.0.0.4:6379 is in no other member's CLUSTER NODES view")
        for t in issue_texts(reading)
    )
    assert reading.roles["default/d"] is Role.REPLICA and reading.mismatches == ()


def test_two_redis_masters_in_one_labelled_shard() -> None:
    """Labels put two Redis masters into one shard, each paired in Redis with a replica of the
    other labelled shard: the shards are Redis's pairs, said in one line."""
    snap = two_shards()
    layout = {"10.0.0.1": None, "10.0.0.2": None, "10.0.0.3": "10.0.0.2", "10.0.0.4": "10.0.0.1"}
    reading = resolve_roles(snap.members, all_views(layout), PORT)
    assert issue_texts(reading) == [
        "redis cluster default/cache: Redis pairs its pods otherwise than their shard labels "
        "say: shards taken from Redis (2 pods moved: default/b, default/d)"
    ]
    assert reading.shards == {"default/b": "1", "default/d": "0"}
    assert reading.roles == {
        "default/a": Role.MASTER,
        "default/b": Role.MASTER,
        "default/c": Role.REPLICA,
        "default/d": Role.REPLICA,
    }
    after = apply_roles(snap, reading)
    shards = {m.key: (m.shard, m.role, m.shard_size) for m in after.members}
    assert shards == {
        "default/a": ("0", Role.MASTER, 2),
        "default/d": ("0", Role.REPLICA, 2),
        "default/b": ("1", Role.MASTER, 2),
        "default/c": ("1", Role.REPLICA, 2),
    }


def test_a_replica_count_redis_contradicts_names_the_setting() -> None:
    """A formation read with identity.replicasPerShard 1 where Redis pairs each master with 2
    replicas: the members join their Redis master's shard, and the warning names the value."""
    # Ordinal order as the create-order formation reads 6 pods with 1 replica per shard:
    # shards 0 {a, d}, 1 {b, e}, 2 {c, f}; Redis made 2 masters (a, b) of 2 replicas each.
    ips = {p: f"10.0.1.{i + 1}" for i, p in enumerate("abcdef")}
    shard = {"a": 0, "b": 1, "c": 2, "d": 0, "e": 1, "f": 2}
    role = {"a": "master", "b": "master", "c": "master"} | dict.fromkeys("def", "replica")
    nodes = [node(n, z, z) for n, z in (("n1", "za"), ("n2", "zb"), ("n3", "zc"))]
    pods = [pod_obj(p, shard[p], role[p], ips[p], f"n{i % 3 + 1}") for i, p in enumerate(ips)]
    snap = snapshot(nodes, pods)
    redis = {
        ips["a"]: None,
        ips["b"]: None,
        ips["c"]: ips["a"],
        ips["d"]: ips["a"],
        ips["e"]: ips["b"],
        ips["f"]: ips["b"],
    }
    reading = resolve_roles(snap.members, all_views(redis), PORT, replicas_per_shard=1)
    assert issue_texts(reading) == [
        "redis cluster default/cache: Redis pairs each master with 2 replicas or more, not "
        "identity.replicasPerShard 1: shards taken from Redis (2 pods moved: default/c, "
        "default/f); set identity.replicasPerShard: 2"
    ]
    after = apply_roles(snap, reading)
    by_shard: dict[str, set[str]] = {}
    for m in after.members:
        by_shard.setdefault(m.shard, set()).add(m.pod.name)
        assert m.shard_size == 3
    assert by_shard == {"0": {"a", "c", "d"}, "1": {"b", "e", "f"}}
    assert {m.pod.name for m in after.members if m.role is Role.MASTER} == {"a", "b"}


# -- the command against real Redis ----------------------------------------------------------


def pod_name(ip: str) -> str:
    return f"cache-{ip.rsplit('.', 1)[1]}"


def cluster_objects(
    h: RedisClusterHarness,
    layout: Mapping[str, str],
    placement: Sequence[tuple[str, Sequence[str]]],
    ip_override: Mapping[str, str] | None = None,
) -> list[dict[str, Any]]:
    """Nodes and Ready pods whose pod IPs are the harness' servers, labelled after ``layout``.

    ``layout``: master IP -> replica IP as the labels will claim (shard = position);
    ``placement``: (node, [server IPs on it]), each node in its own zone.
    """
    shard_of: dict[str, int] = {}
    role_of: dict[str, str] = {}
    for shard, (master, replica) in enumerate(layout.items()):
        shard_of |= {master: shard, replica: shard}
        role_of |= {master: "master", replica: "replica"}
    objs: list[dict[str, Any]] = []
    for i, (nodename, ips) in enumerate(placement):
        objs.append(node(nodename, f"z{i}", f"z{i}-r", memory="64Gi", cpu="16"))
        for ip in ips:
            obj = redis_pod(pod_name(ip), "cache", shard_of[ip], role_of[ip], node=nodename)
            obj["metadata"]["uid"] = f"uid-{ip}"
            obj["status"]["podIP"] = (ip_override or {}).get(ip, ip)
            obj["status"]["conditions"] = [{"type": "Ready", "status": "True"}]
            objs.append(obj)
    return objs


def write_dump(path: Path, objs: list[dict[str, Any]]) -> str:
    path.write_text(yaml.safe_dump({"kind": "List", "items": objs}))
    return str(path)


def run(args: list[str], env: Mapping[str, str] | None = None) -> Any:
    return CliRunner().invoke(main, ["rebalance", *args], env=dict(env or {}))


def failed_over_behind_the_labels(
    h: RedisClusterHarness,
) -> tuple[dict[str, str], list[tuple[str, list[str]]], tuple[str, str]]:
    """Lay three shards over three nodes, then fail shard 1 over in Redis only.

    n0: m0, r1   n1: m1, r2   n2: m2, r0. The labels (pre-failover) spread the masters one
    per node; in Redis r1 now leads, so n0 runs two masters. The one single-failover fix
    is to promote m1 back (promoting r0 would put two masters on n2).
    """
    labelled = h.layout()
    (m0, r0), (m1, r1), (m2, r2) = labelled.items()
    placement = [("n0", [m0, r1]), ("n1", [m1, r2]), ("n2", [m2, r0])]
    failover_to(h.endpoint(r1), timeout_s=20)
    h.wait_layout({m0: r0, r1: m1, m2: r2})
    return labelled, placement, (m1, r1)


@pytest.mark.redis
def test_roles_redis_plans_the_failover_labels_cannot_see(
    redis_cluster: RedisClusterHarness, tmp_path: Path
) -> None:
    h = redis_cluster
    labelled, placement, (m1, r1) = failed_over_behind_the_labels(h)
    dump = write_dump(tmp_path / "dump.yaml", cluster_objects(h, labelled, placement))
    common = ["-f", dump, "--redis-port", str(h.port), "-o", "json"]

    by_labels = run([*common, "--roles", "labels"])
    assert by_labels.exit_code == 0, by_labels.output
    labels_report = json.loads(by_labels.stdout)
    assert labels_report["roles"] == {"source": "labels"}
    assert labels_report["auditBefore"] == [] or all(
        v["severity"] == "soft" for v in labels_report["auditBefore"]
    )
    assert [c for c in labels_report["changes"] if c["kind"] == "failover"] == []

    by_redis = run([*common, "--roles", "redis"])
    assert by_redis.exit_code == 0, by_redis.output
    report = json.loads(by_redis.stdout)
    roles = report["roles"]
    assert roles["source"] == "redis" and roles["unreachable"] == [] and len(roles["read"]) == 6
    assert roles["issues"] == [] and by_redis.stderr == ""
    assert roles["mismatches"] == sorted(
        [
            {
                "pod": f"default/{pod_name(m1)}",
                "label": "master",
                "redis": "replica",
                "confirmed": True,
            },
            {
                "pod": f"default/{pod_name(r1)}",
                "label": "replica",
                "redis": "master",
                "confirmed": True,
            },
        ],
        key=lambda m: str(m["pod"]),
    )
    hard = [v for v in report["auditBefore"] if v["severity"] == "hard"]
    assert [v["rule"] for v in hard] == ["master-exclusivity"]
    assert report["changes"] == [
        {
            "kind": "failover",
            "shard": "default/cache/1",
            "from": f"default/{pod_name(r1)}",
            "to": f"default/{pod_name(m1)}",
        }
    ]

    table = run(["-f", dump, "--redis-port", str(h.port), "--roles", "redis"])
    assert table.exit_code == 0, table.output
    assert "roles: from Redis (6 of 6 pods read)" in table.stdout
    assert f"pod default/{pod_name(m1)} labelled master but Redis says replica" in table.stdout
    assert (
        f"promote default/{pod_name(m1)} over default/{pod_name(r1)}" in table.stdout
        and "dry run" in table.stdout
    )
    # A dry run changes nothing in Redis: shard 1 is still led by r1.
    (m0, r0), _, (m2, r2) = labelled.items()
    assert h.layout() == {m0: r0, r1: m1, m2: r2}


@pytest.mark.redis
def test_apply_with_roles_redis_fails_back_and_relabels(
    redis_cluster: RedisClusterHarness, monkeypatch: pytest.MonkeyPatch
) -> None:
    h = redis_cluster
    labelled, placement, (m1, r1) = failed_over_behind_the_labels(h)
    objs = cluster_objects(h, labelled, placement)
    kube = FakeKubeAdapter(
        nodes=[o for o in objs if o["kind"] == "Node"], pods=[o for o in objs if o["kind"] == "Pod"]
    )
    # The command's one seam to Kubernetes (a string target: the CLI imports the module when the command runs).
    monkeypatch.setattr("placer.rebalance.command.make_adapter", lambda kubeconfig, context: kube)

    # With the labels as the truth there is nothing to do, though Redis has two masters on n0.
    blind = run(["--apply", "--roles", "labels", "--redis-port", str(h.port), "-o", "json"])
    assert blind.exit_code == 0, blind.output
    assert json.loads(blind.stdout)["changes"] == []

    result = run(
        [
            "--apply",
            "--roles",
            "redis",
            "--relabel",
            "--redis-port",
            str(h.port),
            "--report-configmap",
            "redis-placer/report",
            "-o",
            "json",
        ]
    )
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert [(a["kind"], a["target"], a["outcome"]) for a in report["actions"]] == [
        ("failover", f"default/{pod_name(m1)}", "ok"),
        ("relabel", f"default/{pod_name(m1)}", "ok"),
        ("relabel", f"default/{pod_name(r1)}", "ok"),
    ]
    assert [v for v in report["auditAfter"] if v["severity"] == "hard"] == []
    # Redis is back to one master per node, and every label now says what Redis says.
    h.wait_layout(labelled)
    roles = {
        pod["metadata"]["name"]: pod["metadata"]["labels"]["redis-role"] for pod in kube.list_pods()
    }
    assert roles == {
        pod_name(ip): role
        for m, r in labelled.items()
        for ip, role in ((m, "master"), (r, "replica"))
    }
    assert kube.evicted == []
    assert (
        json.loads(kube.configmaps[("redis-placer", "report")]["report.json"])["changes"]
        == (report["changes"])
    )

    again = run(["--apply", "--roles", "redis", "--redis-port", str(h.port), "-o", "json"])
    assert again.exit_code == 0, again.output
    assert json.loads(again.stdout)["changes"] == []  # idempotent: nothing left to fix


@pytest.mark.redis
def test_one_unreachable_pod_is_a_warning(
    redis_cluster_shared: RedisClusterHarness, tmp_path: Path
) -> None:
    h = redis_cluster_shared
    layout = h.layout()
    (m0, r0), (m1, r1), (m2, r2) = layout.items()
    placement = [("n0", [m0, r1]), ("n1", [m1, r2]), ("n2", [m2, r0])]
    # r2's pod claims an address where nothing listens.
    objs = cluster_objects(h, layout, placement, ip_override={r2: "127.0.0.9"})
    dump = write_dump(tmp_path / "dump.yaml", objs)
    result = run(["-f", dump, "--roles", "redis", "--redis-port", str(h.port), "-o", "json"])
    assert result.exit_code == 0, result.output
    roles = json.loads(result.stdout)["roles"]
    ghost = f"default/{pod_name(r2)}"
    assert roles["unreachable"] == [ghost] and len(roles["read"]) == 5
    assert roles["mismatches"] == []
    assert (
        f"warning: pod {ghost}: CLUSTER NODES not read (redis 127.0.0.9:{h.port}: unreachable"
        in result.stderr
    )
    assert "label role kept" in result.stderr
    # The real server behind it is a node no pod claims: said once, with its address.
    assert result.stderr.count(f"{r2}:{h.port}") == 1
    assert "matches no managed pod" in result.stderr


def test_no_pod_reachable_is_exit_2_naming_the_pods(tmp_path: Path) -> None:
    objs = [node("n0", "z0", "z0-r"), node("n1", "z1", "z1-r")]
    for i, (role, n) in enumerate((("master", "n0"), ("replica", "n1"))):
        obj = redis_pod(f"cache-{i}", "cache", 0, role, node=n)
        obj["status"]["podIP"] = "127.0.0.9"
        objs.append(obj)
    dump = write_dump(tmp_path / "dump.yaml", objs)
    result = run(["-f", dump, "--roles", "redis", "--redis-port", "1"])
    assert result.exit_code == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1
    assert lines[0].startswith(
        "error: --roles redis: no Redis pod could be read; tried default/cache-0 "
        "(127.0.0.9:1), default/cache-1 (127.0.0.9:1); first error: redis 127.0.0.9:1: unreachable"
    )
    assert result.stdout == ""


def test_no_pod_ip_at_all_is_exit_2(tmp_path: Path) -> None:
    objs = [node("n0", "z0", "z0-r"), redis_pod("cache-0", "cache", 0, "master", node="n0")]
    result = run(["-f", write_dump(tmp_path / "dump.yaml", objs), "--roles", "redis"])
    assert result.exit_code == 2
    assert "none of the 1 running Redis pods has a pod IP" in result.stderr


@pytest.mark.redis
def test_password_right_wrong_and_missing(
    redis_cluster_auth: RedisClusterHarness, redis_password: str, tmp_path: Path
) -> None:
    h = redis_cluster_auth
    layout = h.layout()
    (m0, r0), (m1, r1), (m2, r2) = layout.items()
    placement = [("n0", [m0, r1]), ("n1", [m1, r2]), ("n2", [m2, r0])]
    dump = write_dump(tmp_path / "dump.yaml", cluster_objects(h, layout, placement))
    policy = tmp_path / "policy.yaml"
    policy.write_text(yaml.safe_dump({"redis": {"port": h.port, "passwordEnv": "REDIS_PW"}}))
    args = ["-f", dump, "-p", str(policy), "--roles", "redis", "-o", "json"]

    right = run(args, env={"REDIS_PW": redis_password})
    assert right.exit_code == 0, right.output
    roles = json.loads(right.stdout)["roles"]
    assert len(roles["read"]) == 6 and roles["mismatches"] == [] and roles["issues"] == []

    wrong = run(args, env={"REDIS_PW": redis_password + "-not"})
    assert wrong.exit_code == 2
    assert wrong.stderr.count("\n") == 1, "one line"
    assert "redis cluster default/cache: redis 127.0.0.2" in wrong.stderr
    assert "authentication failed while CLUSTER NODES: wrong username or password" in (wrong.stderr)
    assert "(password from environment variable REDIS_PW); nothing was changed" in wrong.stderr
    assert redis_password not in wrong.output

    secret = tmp_path / "secret"
    secret.write_text(redis_password + "\n")
    from_file = run([*args, "--password-file", str(secret)], env={"REDIS_PW": ""})
    assert from_file.exit_code == 0, from_file.output
    assert redis_password not in from_file.output

    missing = run(args, env={"REDIS_PW": ""})
    assert missing.exit_code == 2
    assert "a password is required (NOAUTH)" in missing.stderr


@pytest.mark.redis
def test_relabel_makes_stale_labels_follow_redis(
    redis_cluster: RedisClusterHarness, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A failover that broke no rule: nothing to plan, but --relabel fixes the two labels."""
    h = redis_cluster
    labelled = h.layout()
    (m0, r0), (m1, r1), (m2, r2) = labelled.items()
    placement = [("n0", [m0, r1]), ("n1", [m1, r0]), ("n2", [m2]), ("n3", [r2])]
    failover_to(h.endpoint(r2), timeout_s=20)
    h.wait_layout({m0: r0, m1: r1, r2: m2})
    objs = cluster_objects(h, labelled, placement)
    kube = FakeKubeAdapter(
        nodes=[o for o in objs if o["kind"] == "Node"], pods=[o for o in objs if o["kind"] == "Pod"]
    )
    monkeypatch.setattr("placer.rebalance.command.make_adapter", lambda kubeconfig, context: kube)

    def labels() -> dict[str, str]:
        return {
            p["metadata"]["name"]: p["metadata"]["labels"]["redis-role"] for p in kube.pods.values()
        }

    stale = labels()
    args = ["--roles", "redis", "--relabel", "--redis-port", str(h.port), "-o", "json"]
    dry = run(args)
    assert dry.exit_code == 0, dry.output
    dry_report = json.loads(dry.stdout)
    assert dry_report["changes"] == [] and "actions" not in dry_report
    assert [
        (m["pod"], m["label"], m["redis"]) for m in dry_report["roles"]["mismatches"]
    ] == sorted(
        [
            (f"default/{pod_name(m2)}", "master", "replica"),
            (f"default/{pod_name(r2)}", "replica", "master"),
        ]
    )
    assert labels() == stale  # a dry run patches nothing

    applied = run(["--apply", *args])
    assert applied.exit_code == 0, applied.output
    actions = json.loads(applied.stdout)["actions"]
    assert sorted(
        (a["kind"], a["target"], a["destination"], a["outcome"]) for a in actions
    ) == sorted(
        [
            ("relabel", f"default/{pod_name(m2)}", "replica", "ok"),
            ("relabel", f"default/{pod_name(r2)}", "master", "ok"),
        ]
    )
    assert labels() == stale | {pod_name(m2): "replica", pod_name(r2): "master"}
    assert h.layout() == {m0: r0, m1: r1, r2: m2}  # Redis untouched
    assert kube.evicted == []

    settled = run(["--apply", *args])
    assert settled.exit_code == 0, settled.output
    report = json.loads(settled.stdout)
    assert report["roles"]["mismatches"] == [] and "actions" not in report
