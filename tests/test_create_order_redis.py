"""``create_order.masters_of`` against the real ``redis-cli --cluster create``.

The create-order formation guesses each pod's shard from its ordinal alone, so the guess is only
as good as its model of how redis-cli deals replicas to masters. Here every case is formed for
real: ``nodes`` redis-server processes, each on its own loopback address (as pods have their own
IPs) and one shared port, given to redis-cli in ordinal order; the roles the servers end up with
are then compared with ``masters_of``. Each case uses its own address range (127.42.<case>.x) so
cases, and other Redis tests on 127.0.0.x, never share an address.

Every case here has at least 3 masters: redis-cli refuses to create a cluster with fewer.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import shutil
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import redis
import yaml
from click.testing import CliRunner

from models.identity.formations.create_order import masters_of
from placer.cli import main
from placer.kube.fake import FakeKubeAdapter
from tests.kube_dicts import node
from tests.operator_shapes import bitnami, pods_of
from tests.redis_harness import (
    NODE_TIMEOUT_MS,
    START_TIMEOUT_S,
    HarnessError,
    pick_port,
    redis_binaries_missing,
    wait_until,
)
from tests.redis_servers import RedisSecurity, server_config, spawn_server

pytestmark = pytest.mark.redis

# (nodes, --cluster-replicas): exact multiples of R + 1, and node counts that leave nodes over
# for redis-cli's "Adding extra replicas..." pass; (11, 2) and (15, 3) leave 2 and 3 over, which
# shows that pass gives one each to the masters in order, not R to the first.
CASES = [(6, 1), (9, 2), (7, 1), (8, 1), (10, 2), (12, 3), (11, 2), (15, 3)]
CREATE_TIMEOUT_S = 60.0
"""A guard against a hang, not a speed check: ``--cluster create`` waits for gossip to join all
the nodes, which took over 20 s once for 11 servers on a loaded 2-core CI machine (3 s alone)."""
ROLES_TIMEOUT_S = 10.0


@dataclass
class Formed:
    """The servers of one case, in ordinal order, all on one port."""

    ips: list[str]
    port: int
    procs: list[subprocess.Popen[bytes]]
    workdir: Path

    def client(self, ordinal: int) -> redis.Redis:
        return redis.Redis(
            host=self.ips[ordinal],
            port=self.port,
            socket_timeout=2.0,
            socket_connect_timeout=2.0,
            decode_responses=True,
        )

    def log_tail(self, ordinal: int, lines: int = 10) -> str:
        path = self.workdir / f"node{ordinal}" / "redis.log"
        with contextlib.suppress(OSError):
            return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
        return "(no log)"


def _spawn(ips: list[str], port: int, workdir: Path) -> list[subprocess.Popen[bytes]]:
    procs: list[subprocess.Popen[bytes]] = []
    for ordinal, ip in enumerate(ips):
        node_dir = workdir / f"node{ordinal}"
        config = server_config(
            ip, port, node_dir, node_timeout_ms=NODE_TIMEOUT_MS, security=RedisSecurity()
        )
        procs.append(spawn_server(config, node_dir))
    return procs


def _stop(procs: list[subprocess.Popen[bytes]]) -> None:
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
    for proc in procs:
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=10)


@contextlib.contextmanager
def servers(case: int, nodes: int, workdir: Path) -> Iterator[Formed]:
    """``nodes`` answering cluster-mode servers on 127.42.<case>.1.., always stopped after."""
    reason = redis_binaries_missing()
    if reason:
        pytest.skip(reason)
    ips = [f"127.42.{case}.{1 + i}" for i in range(nodes)]
    rng = random.Random(os.getpid() ^ time.monotonic_ns())
    procs: list[subprocess.Popen[bytes]] = []
    try:
        port = pick_port(tuple(ips), rng)
        procs = _spawn(ips, port, workdir)
        formed = Formed(ips=ips, port=port, procs=procs, workdir=workdir)

        def all_answer() -> str | None:
            for ordinal, proc in enumerate(procs):
                if proc.poll() is not None:
                    raise HarnessError(
                        f"redis-server {ips[ordinal]}:{port} exited with {proc.returncode}:\n"
                        f"{formed.log_tail(ordinal)}"
                    )
                with formed.client(ordinal) as client:
                    client.ping()
            return None

        wait_until(all_answer, START_TIMEOUT_S, "every redis-server to answer PING")
        yield formed
    finally:
        _stop(procs)


def create(formed: Formed, replicas: int) -> None:
    cli = shutil.which("redis-cli")
    assert cli is not None
    cmd = [cli, "--cluster", "create", *(f"{ip}:{formed.port}" for ip in formed.ips)]
    cmd += ["--cluster-replicas", str(replicas), "--cluster-yes"]
    done = subprocess.run(
        cmd, capture_output=True, text=True, timeout=CREATE_TIMEOUT_S, check=False
    )
    output = done.stdout + done.stderr
    assert done.returncode == 0 and "[OK] All 16384 slots covered" in done.stdout, output


def formed_masters(formed: Formed) -> list[int]:
    """For each ordinal, the ordinal of its master as the servers report it (a master: itself).

    Each server's own ``myself`` line is authoritative for its role; a node counts as a master
    only once it owns slots, so a replica not yet attached (still an empty master) keeps the
    poll going.
    """
    nodes = len(formed.ips)
    result: list[int] = []

    def roles_known() -> str | None:
        by_id: dict[str, int] = {}
        own: list[tuple[str, str | None]] = []  # (flags, master_id)
        for ordinal in range(nodes):
            with formed.client(ordinal) as client:
                view = client.execute_command("CLUSTER NODES")
            me = [info for info in view.values() if "myself" in str(info["flags"]).split(",")]
            if len(me) != 1:
                return f"ordinal {ordinal} reports {len(me)} myself lines"
            flags = set(str(me[0]["flags"]).split(","))
            by_id[str(me[0]["node_id"])] = ordinal
            if "slave" in flags:
                own.append(("slave", str(me[0]["master_id"])))
            elif "master" in flags and me[0]["slots"]:
                own.append(("master", None))
            else:
                return f"ordinal {ordinal} is {sorted(flags)} with no slots yet"
        result.clear()
        for ordinal, (role, master_id) in enumerate(own):
            if role == "master":
                result.append(ordinal)
            elif master_id in by_id:
                result.append(by_id[master_id])
            else:
                return f"ordinal {ordinal} replicates unknown node {master_id}"
        return None

    wait_until(roles_known, ROLES_TIMEOUT_S, "every node to be a master with slots or a replica")
    return result


@pytest.mark.parametrize(
    ("case", "nodes", "replicas"),
    [(case, n, r) for case, (n, r) in enumerate(CASES)],
    ids=[f"{n}nodes-{r}replicas" for n, r in CASES],
)
def test_masters_of_matches_redis_cli_cluster_create(
    tmp_path: Path, case: int, nodes: int, replicas: int
) -> None:
    with servers(case, nodes, tmp_path) as formed:
        create(formed, replicas)
        real = formed_masters(formed)
    assert real == masters_of(nodes, replicas)


# -- a replica count the policy gets wrong, against the cluster redis-cli made ----------------

PAIRING_CASE = len(CASES) + 30
"""Its own address range, apart from the cases above."""


def views_differ(formed: Formed) -> str | None:
    """Why the servers' ``CLUSTER NODES`` views do not yet agree on every node's role and
    master (gossip still spreading what redis-cli set up), or None once they do."""
    seen: dict[str, tuple[str, str]] = {}
    for ordinal in range(len(formed.ips)):
        with formed.client(ordinal) as client:
            view = client.execute_command("CLUSTER NODES")
        for address, info in view.items():
            flags = set(str(info["flags"]).split(",")) - {"myself"}
            if flags & {"fail", "fail?", "handshake", "noaddr"}:
                return f"ordinal {ordinal} sees {address} as {sorted(flags)}"
            role = "replica" if "slave" in flags else "master"
            said = (role, str(info["master_id"]) if role == "replica" else "-")
            key = str(info["node_id"])
            if seen.setdefault(key, said) != said:
                return f"ordinal {ordinal} sees {address} as {said}, another as {seen[key]}"
    return None


def _bitnami_objects(formed: Formed, masters: list[int]) -> list[dict[str, Any]]:
    """The chart's StatefulSet and pods over 3 zones, each pod's IP its server's, Ready, and
    labelled with the role Redis gave it (as ``rebalance --relabel`` leaves them)."""
    count = len(formed.ips)
    sets = bitnami("rb", nodes=count)
    names = {f"rb-redis-cluster-{i}": f"n{i}" for i in range(count)}
    pods = pods_of(sets, names)
    for i, pod in enumerate(pods):
        pod["status"]["podIP"] = formed.ips[i]
        pod["status"]["conditions"] = [{"type": "Ready", "status": "True"}]
        pod["metadata"]["labels"]["redis-role"] = "master" if masters[i] == i else "replica"
    nodes = [node(f"n{i}", f"z{i % 3}", f"z{i % 3}-r{i}", memory="64Gi") for i in range(count)]
    return [*nodes, *sets, *pods]


@pytest.mark.redis
def test_rebalance_believes_the_pairing_redis_made_over_a_wrong_replica_count(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """bitnami installed with cluster.replicas 2 (12 pods: 4 masters of 2 replicas each) and the
    profile's policy left at identity.replicasPerShard 1, which reads 6 shards of 2. A live
    ``rebalance`` (roles auto, as the CronJob runs it) takes the shards Redis formed: its audit
    is the one the right setting gives (the changes are left out: what the solver finds within
    its time limit depends on the machine), and it says in one line which setting to change.
    Without Redis, the role labels show the mismatch too (audit, binder)."""
    with servers(PAIRING_CASE, 12, tmp_path) as formed:
        create(formed, 2)
        masters = formed_masters(formed)
        assert masters == masters_of(12, 2) != masters_of(12, 1)
        wait_until(lambda: views_differ(formed), ROLES_TIMEOUT_S, "every view to agree")
        objs = _bitnami_objects(formed, masters)
        kube = FakeKubeAdapter(
            nodes=[o for o in objs if o["kind"] == "Node"],
            pods=[o for o in objs if o["kind"] == "Pod"],
            statefulsets=[o for o in objs if o["kind"] == "StatefulSet"],
        )
        monkeypatch.setattr("placer.rebalance.command.make_adapter", lambda *_: kube)
        reports = {}
        for replicas in (1, 2):
            policy = tmp_path / f"policy-{replicas}.yaml"
            policy.write_text(f"identity: {{profile: bitnami, replicasPerShard: {replicas}}}\n")
            args = ["rebalance", "-p", str(policy), "--redis-port", str(formed.port), "-o", "json"]
            reports[replicas] = CliRunner().invoke(main, args)
    wrong, right = reports[1], reports[2]
    assert right.exit_code == 0 and right.stderr == "", right.output
    assert wrong.exit_code == 0, wrong.output
    assert wrong.stderr.splitlines() == [
        "warning: redis cluster default/rb: Redis pairs each master with 2 replicas or more, not "
        "identity.replicasPerShard 1: shards taken from Redis (6 pods moved: "
        "default/rb-redis-cluster-10, default/rb-redis-cluster-11, default/rb-redis-cluster-4 "
        "and 3 more); set identity.replicasPerShard: 2"
    ]
    got, want = json.loads(wrong.stdout), json.loads(right.stdout)
    assert got["roles"]["source"] == "redis" and len(got["roles"]["read"]) == 12
    assert [v for v in got["auditBefore"] if v["severity"] == "hard"] == []
    assert got["auditBefore"] == want["auditBefore"]
    formula = masters_of(12, 1)
    assert got["roles"]["shards"] == {
        f"default/rb-redis-cluster-{i}": str(m) for i, m in enumerate(masters) if formula[i] != m
    }
    assert "shards" not in want["roles"]
    assert kube.evicted == [] and kube.binds == []

    dump = tmp_path / "dump.yaml"
    dump.write_text(yaml.safe_dump({"kind": "List", "items": objs}))
    audit = CliRunner().invoke(
        main, ["audit", "-f", str(dump), "-p", str(tmp_path / "policy-1.yaml")]
    )
    assert (
        "warning: statefulset default/rb-redis-cluster: the role labels name 4 masters among the "
        "12 pods, but identity.replicasPerShard 1 reads 6, so the shards are read wrong; if each "
        "master has 2 replicas (bitnami: the chart's cluster.replicas), set "
        "identity.replicasPerShard: 2"
    ) in audit.stderr.splitlines()
