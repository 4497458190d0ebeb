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
import os
import random
import shutil
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import redis

from models.identity.formations.create_order import masters_of
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
