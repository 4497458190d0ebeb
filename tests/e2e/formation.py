"""Redis Clusters formed the way each deployment forms them, over the e2e pods' real servers.

- bitnami chart: pod 0 runs ``redis-cli --cluster create`` over every pod's IP in ordinal order
  with ``--cluster-replicas R``;
- OT operator: ``--cluster create`` over the leaders alone, then each follower ``i`` joined with
  ``--cluster add-node <follower> <leader i mod L> --cluster-slave`` (no master ID: redis-cli
  picks the master with the fewest replicas, the entry node first among equals);
- valkey-io operator: the members with ``valkey.io/node-index`` 0 take the slots, every other
  member replicates the primary of its shard.

And what the tests then read of Redis: who is master, where, and whether the cluster is whole.
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import partial

import redis

from tests.e2e.redis_pods import REDIS_PORT, RedisPods
from tests.redis_harness import wait_until as harness_wait
from tests.redis_servers import cli_command

CREATE_TIMEOUT_S = 90.0


class FormationError(RuntimeError):
    """redis-cli could not form the cluster as the deployment does."""


def _cli(pods: RedisPods, *args: str) -> str:
    cmd, env = cli_command(pods.security, *args)
    done = subprocess.run(
        cmd, env=env, capture_output=True, text=True, timeout=CREATE_TIMEOUT_S, check=False
    )
    if done.returncode != 0:
        tail = "\n".join((done.stdout + done.stderr).splitlines()[-15:])
        raise FormationError(f"{' '.join(args[:3])} failed ({done.returncode}):\n{tail}")
    return done.stdout


def _address(ip: str) -> str:
    return f"{ip}:{REDIS_PORT}"


def create_order(pods: RedisPods, ips: Sequence[str], replicas: int) -> None:
    """The bitnami chart's pod 0: every pod, in ordinal order."""
    out = _cli(
        pods,
        "--cluster",
        "create",
        *(_address(ip) for ip in ips),
        "--cluster-replicas",
        str(replicas),
        "--cluster-yes",
    )
    if "[OK] All 16384 slots covered" not in out:
        raise FormationError(out[-2000:])


def leaders_then_followers(
    pods: RedisPods, leaders: Sequence[str], followers: Sequence[str] = ()
) -> None:
    """The OT operator: the leaders first (once Ready), the followers later as they come."""
    if leaders:
        _cli(pods, "--cluster", "create", *(_address(ip) for ip in leaders), "--cluster-yes")
    add_followers(pods, leaders, followers)


def add_followers(pods: RedisPods, leaders: Sequence[str], followers: Sequence[str]) -> None:
    for i, follower in enumerate(followers):
        entry = leaders[i % len(leaders)]
        _cli(pods, "--cluster", "add-node", _address(follower), _address(entry), "--cluster-slave")
        wait_until(partial(_joined, pods, follower), 60.0, f"{follower} to join as a replica")


def primaries_by_index(pods: RedisPods, shards: Mapping[str, Sequence[str]]) -> None:
    """valkey-io: member 0 of each shard is its primary, the others replicate it."""
    primaries = [members[0] for _, members in sorted(shards.items())]
    _cli(pods, "--cluster", "create", *(_address(ip) for ip in primaries), "--cluster-yes")
    for _, members in sorted(shards.items()):
        with pods.client(members[0]) as c:
            primary_id = str(c.execute_command("CLUSTER", "MYID"))
        for replica in members[1:]:
            _cli(
                pods,
                "--cluster",
                "add-node",
                _address(replica),
                _address(members[0]),
                "--cluster-slave",
                "--cluster-master-id",
                primary_id,
            )


def _joined(pods: RedisPods, ip: str) -> str | None:
    with pods.client(ip) as c:
        role = c.execute_command("ROLE")
    return None if role and role[0] == "slave" and role[3] == "connected" else f"role {role!r}"


def wait_until(check: Callable[[], str | None], timeout_s: float, what: str) -> None:
    """The harness's wait (tests.redis_harness), polling at a pace the API server is asked at."""
    harness_wait(check, timeout_s, what, poll_s=0.2)


# -- reading the cluster -------------------------------------------------------------------------


@dataclass(frozen=True)
class Topology:
    """The cluster as one live node sees it: master IP -> its replicas' IPs, and the IPs of
    nodes flagged failing."""

    masters: dict[str, list[str]]
    failing: frozenset[str]
    state: str


def topology(pods: RedisPods, ips: Sequence[str]) -> Topology:
    """As the first answering node of ``ips`` sees it."""
    last: Exception | None = None
    for ip in ips:
        try:
            with pods.client(ip) as c:
                text = str(c.execute_command("CLUSTER", "NODES"))
                state = str(c.execute_command("CLUSTER", "INFO")).split("cluster_state:", 1)[1]
        except (redis.RedisError, OSError) as exc:
            last = exc
            continue
        return _parse(text, state.split()[0])
    raise FormationError(f"no node of {len(ips)} answered: {last}")


def _parse(text: str, state: str) -> Topology:
    ip_of: dict[str, str] = {}
    master_of: dict[str, str] = {}
    flags_of: dict[str, set[str]] = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) < 8:
            continue
        node_id, address, flags = parts[0], parts[1], set(parts[2].split(","))
        ip_of[node_id] = address.split("@", 1)[0].rsplit(":", 1)[0]
        flags_of[node_id] = flags
        if "slave" in flags and parts[3] != "-":
            master_of[node_id] = parts[3]
    masters: dict[str, list[str]] = {}
    for node_id, flags in flags_of.items():
        if "master" in flags and not flags & {"fail", "noaddr"}:
            masters.setdefault(ip_of[node_id], [])
    for replica, master in master_of.items():
        if ip_of.get(master) in masters:
            masters[ip_of[master]].append(ip_of[replica])
    failing = frozenset(ip_of[n] for n, f in flags_of.items() if f & {"fail", "fail?"})
    return Topology(masters=masters, failing=failing, state=state)


def healthy(pods: RedisPods, ips: Sequence[str], masters: int) -> str | None:
    """None when every node of ``ips`` answers, says cluster_state:ok, flags no one, and agrees
    on ``masters`` masters each with a connected replica link; else what is still wrong."""
    seen: set[tuple[str, tuple[str, ...]]] | None = None
    for ip in ips:
        with pods.client(ip) as c:
            info = str(c.execute_command("CLUSTER", "INFO"))
            text = str(c.execute_command("CLUSTER", "NODES"))
            replication = c.info("replication")
        top = _parse(text, info.split("cluster_state:", 1)[1].split()[0])
        if top.state != "ok":
            return f"{ip} cluster_state {top.state}"
        if top.failing:
            return f"{ip} flags {sorted(top.failing)}"
        if len(top.masters) != masters:
            return f"{ip} sees {len(top.masters)} masters"
        if replication.get("role") == "slave" and replication.get("master_link_status") != "up":
            return f"{ip} replication link {replication.get('master_link_status')}"
        pairs = {(m, tuple(sorted(r))) for m, r in top.masters.items()}
        if seen is None:
            seen = pairs
        elif pairs != seen:
            return f"{ip} disagrees on the roles"
    return None


def zone_losses(top: Topology, zone_of_ip: Mapping[str, str]) -> dict[str, list[str]]:
    """For each zone, what losing it would take: ``majority`` when the masters left are not
    more than half, and each shard (by its master's IP) whose every member is in the zone."""
    total = len(top.masters)
    out: dict[str, list[str]] = {}
    for zone in sorted(set(zone_of_ip.values())):
        lost: list[str] = []
        left = sum(1 for m in top.masters if zone_of_ip[m] != zone)
        if 2 * left <= total:
            lost.append("majority")
        for master, replicas in sorted(top.masters.items()):
            if all(zone_of_ip[ip] == zone for ip in [master, *replicas]):
                lost.append(f"shard of {master}")
        out[zone] = lost
    return out
