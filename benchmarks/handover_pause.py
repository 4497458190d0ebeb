"""Benchmark: the write pause of one handover alone, on a Redis Cluster with nothing else running.

    python -m benchmarks.handover_pause [--rounds 10] [--tls]

A 3-master / 3-replica cluster of real redis-server processes on loopback (tests/redis_harness,
`cluster-node-timeout` as the harness sets it; with ``--tls``: TLS only, client certificates and
a password, as the bitnami chart serves). A writer does ``SET`` + ``WAIT 1`` on one shard's
slots all along, following ``MOVED`` as a cluster client does; each round hands that shard's
master role to its replica with ``placer.redis.ops.failover_to`` (the guard's ``CLUSTER
FAILOVER``), and the longest stretch with no write taken around it is the handover's pause.
Printed: each round's pause, then the median and the worst. No Kubernetes, no pod churn, no disk traffic from other servers: what the maintenance
benchmark's per-shard outage would be if the handover were all there was.
"""

import argparse
import contextlib
import statistics
import tempfile
import threading
import time
from pathlib import Path

import redis
from redis.crc import key_slot

from placer.redis.ops import failover_to
from tests.redis_harness import RedisClusterHarness
from tests.tls_material import make_authority, write_leaf


class Writer:
    def __init__(self, harness: RedisClusterHarness, master: str) -> None:
        self.harness = harness
        self.master = master
        self.key_tag = next(f"t{i}" for i in range(100_000) if self._owned(f"t{i}", master))
        self.last_ok = time.monotonic()
        self.gaps: list[tuple[float, float]] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.clients: dict[str, redis.Redis] = {}

    def _owned(self, tag: str, ip: str) -> bool:
        slot = key_slot(f"{{{tag}}}".encode())
        with self.harness.client(ip) as c:
            for lo, hi, master, *_ in c.execute_command("CLUSTER", "SLOTS"):
                if int(lo) <= slot <= int(hi):
                    return str(master[0]) == ip
        return False

    def _client(self, ip: str) -> redis.Redis:
        if ip not in self.clients:
            self.clients[ip] = self.harness.client(ip, timeout_s=2.0)
        return self.clients[ip]

    def _run(self) -> None:
        n = 0
        while not self.stop.is_set():
            n += 1
            try:
                pipe = self._client(self.master).pipeline(transaction=False)
                pipe.set(f"{{{self.key_tag}}}:{n}", "v")
                pipe.execute_command("WAIT", 1, 100)
                pipe.execute()
            except redis.ResponseError as exc:
                if str(exc).startswith("MOVED"):
                    self.master = str(exc).split()[2].rsplit(":", 1)[0]
                continue
            except (redis.RedisError, OSError):
                self.clients.pop(self.master, None)
                time.sleep(0.01)
                continue
            now = time.monotonic()
            if now - self.last_ok > 0.02:
                self.gaps.append((self.last_ok, now))
            self.last_ok = now
            time.sleep(0.005)

    def longest(self, since: float, until: float) -> float:
        return max(
            (min(b, until) - max(a, since) for a, b in self.gaps if b > since and a < until),
            default=0.0,
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--tls", action="store_true")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="handover-pause-"))
    tls = (
        write_leaf(work / "tls", make_authority("redis-ca"), "cache", dns=["cache"])
        if args.tls
        else None
    )
    harness = RedisClusterHarness(work / "redis", password="pw" if args.tls else None, tls=tls)
    harness.start()
    try:
        master, replica = sorted(harness.layout().items())[0]
        writer = Writer(harness, master)
        writer.thread.start()
        time.sleep(1.0)
        pauses: list[float] = []
        for i in range(args.rounds):
            harness.wait_healthy()
            time.sleep(1.0)
            began = time.monotonic()
            failover_to(harness.endpoint(replica), old_master_endpoint=harness.endpoint(master))
            time.sleep(1.0)
            pause = writer.longest(began, time.monotonic())
            pauses.append(pause)
            print(f"round {i + 1}: {master} -> {replica}: longest write pause {pause:.3f} s")
            master, replica = replica, master
            # Redis refuses another failover of the shard for 2 x node-timeout.
            time.sleep(2 * harness.node_timeout_ms / 1000)
        writer.stop.set()
        writer.thread.join(timeout=5)
        print(
            f"{'TLS + password' if args.tls else 'plain'}: {args.rounds} handovers, write pause "
            f"median {statistics.median(pauses):.3f} s, worst {max(pauses):.3f} s"
        )
    finally:
        with contextlib.suppress(Exception):
            harness.stop()


if __name__ == "__main__":
    main()
