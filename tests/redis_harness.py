"""A real 6-process Redis Cluster on loopback, for tests that must not mock Redis.

Why: failover and topology code is only trustworthy against real ``redis-server``
processes. Each node gets its own "pod IP" (127.0.0.2 ... 127.0.0.7) on one shared
port, as pods in Kubernetes do; every 127.x address is loopback on Linux.

Use the pytest fixtures from a test module with::

    pytest_plugins = ["tests.redis_harness"]

and request ``redis_cluster`` (fresh, no password), ``redis_cluster_auth`` (fresh,
``requirepass``/``masterauth`` set) or ``redis_cluster_shared`` (one per module; tests
using it must leave the layout as they found it). Tests are skipped with a clear
reason when ``redis-server`` or ``redis-cli`` is not on PATH.

This harness reads the cluster with redis-py's own parsers on purpose, so it stays
an independent check of ``placer.redis.ops``.
"""

from __future__ import annotations

import contextlib
import os
import random
import secrets
import socket
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import redis
from redis.cluster import RedisCluster

from placer.redis.ops import RedisEndpoint, RedisTls
from tests.redis_servers import (
    RedisSecurity,
    cli_command,
    redis_binaries_missing,
    server_config,
    spawn_server,
)
from tests.redis_servers import client as server_client
from tests.tls_material import LeafFiles

DEFAULT_IPS: tuple[str, ...] = tuple(f"127.0.0.{i}" for i in range(2, 8))
NODE_TIMEOUT_MS = 2000
START_TIMEOUT_S = 30.0
HEALTH_TIMEOUT_S = 30.0
POLL_S = 0.05


class HarnessError(RuntimeError):
    """The test cluster could not be brought to the requested state in time."""


def wait_until(
    check: Callable[[], str | None], timeout_s: float, what: str, poll_s: float = POLL_S
) -> None:
    """Poll ``check`` until it returns None (done); it returns the current problem otherwise.

    Polling instead of sleeping keeps the suite fast; the last problem makes a
    timeout message say what was still wrong.
    """
    deadline = time.monotonic() + timeout_s
    problem: str | None = "not checked yet"
    while True:
        try:
            problem = check()
        except (redis.RedisError, OSError) as exc:
            problem = f"{type(exc).__name__}: {exc}"
        if problem is None:
            return
        if time.monotonic() >= deadline:
            raise HarnessError(f"timed out after {timeout_s:g}s waiting for {what}: {problem}")
        time.sleep(poll_s)


def _port_is_free(ip: str, port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((ip, port))
        except OSError:
            return False
    return True


def pick_port(ips: tuple[str, ...], rng: random.Random) -> int:
    """A port free on every IP, with its cluster-bus port (+10000) free too."""
    for _ in range(200):
        port = rng.randrange(20000, 30000)
        if all(_port_is_free(ip, p) for ip in ips for p in (port, port + 10000)):
            return port
    raise HarnessError("no free port pair found in 20000-39999 on the loopback IPs")


def _nodes(client: redis.Redis) -> dict[str, dict[str, Any]]:
    """CLUSTER NODES through redis-py's parser, plus ``flag_set`` (its ``flags`` is a string)."""
    parsed: dict[str, dict[str, Any]] = client.execute_command("CLUSTER NODES")
    for entry in parsed.values():
        entry["flag_set"] = set(str(entry["flags"]).split(","))
    return parsed


@dataclass
class RedisNode:
    """One redis-server process with its own IP, directory and log."""

    ip: str
    port: int
    workdir: Path
    proc: subprocess.Popen[bytes]

    @property
    def address(self) -> str:
        return f"{self.ip}:{self.port}"

    @property
    def log_path(self) -> Path:
        return self.workdir / "redis.log"

    def log_tail(self, lines: int = 15) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return "(no log)"
        return "\n".join(text.splitlines()[-lines:])


class RedisClusterHarness:
    """Starts, creates, inspects and tears down a 3-master / 3-replica Redis Cluster."""

    def __init__(
        self,
        workdir: Path,
        *,
        password: str | None = None,
        tls: LeafFiles | None = None,
        ips: tuple[str, ...] = DEFAULT_IPS,
        node_timeout_ms: int = NODE_TIMEOUT_MS,
    ) -> None:
        if len(ips) != 6:
            raise ValueError("the harness builds 3 masters + 3 replicas: give 6 IPs")
        self.workdir = workdir
        self.password = password
        self.tls = tls
        self.security = RedisSecurity(password=password, tls=tls)
        self.ips = ips
        self.node_timeout_ms = node_timeout_ms
        self.port = 0
        self.nodes: list[RedisNode] = []

    # -- lifecycle -------------------------------------------------------------

    def start(self, attempts: int = 3) -> None:
        """Start all servers, create the cluster and wait until it is fully healthy.

        A port can be taken between the free-port probe and the server bind, so the
        whole start is retried on a new port.
        """
        rng = random.Random(os.getpid() ^ time.monotonic_ns())
        last: HarnessError | None = None
        for attempt in range(attempts):
            self.port = pick_port(self.ips, rng)
            try:
                self._spawn_all(attempt)
                self._create_cluster()
                self.wait_healthy()
                return
            except HarnessError as exc:
                last = exc
                self.stop()
        raise HarnessError(f"could not start a Redis Cluster after {attempts} attempts: {last}")

    def stop(self) -> None:
        """Kill every server and reap it; safe to call twice."""
        for node in self.nodes:
            if node.proc.poll() is None:
                node.proc.kill()
        for node in self.nodes:
            with contextlib.suppress(subprocess.TimeoutExpired):
                node.proc.wait(timeout=10)
        self.nodes = []

    def __enter__(self) -> RedisClusterHarness:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _spawn_all(self, attempt: int) -> None:
        for ip in self.ips:
            node_dir = self.workdir / f"try{attempt}-{ip}"
            config = server_config(
                ip,
                self.port,
                node_dir,
                node_timeout_ms=self.node_timeout_ms,
                security=self.security,
            )
            proc = spawn_server(config, node_dir)
            self.nodes.append(RedisNode(ip=ip, port=self.port, workdir=node_dir, proc=proc))

        def all_answer() -> str | None:
            for node in self.nodes:
                if node.proc.poll() is not None:
                    raise HarnessError(
                        f"redis-server {node.address} exited with {node.proc.returncode}:\n"
                        f"{node.log_tail()}"
                    )
                with self.client(node.ip) as client:
                    client.ping()
            return None

        wait_until(all_answer, START_TIMEOUT_S, "every redis-server to answer PING")

    def _create_cluster(self) -> None:
        cmd, env = cli_command(
            self.security,
            "--cluster",
            "create",
            *(n.address for n in self.nodes),
            "--cluster-replicas",
            "1",
            "--cluster-yes",
        )
        try:
            done = subprocess.run(
                cmd, env=env, capture_output=True, text=True, timeout=START_TIMEOUT_S, check=False
            )
        except subprocess.TimeoutExpired as exc:
            raise HarnessError(
                f"redis-cli --cluster create hung for {START_TIMEOUT_S:g}s "
                "(are the servers started with bind-source-addr?)"
            ) from exc
        if done.returncode != 0 or "[OK] All 16384 slots covered" not in done.stdout:
            tail = "\n".join((done.stdout + done.stderr).splitlines()[-15:])
            raise HarnessError(f"redis-cli --cluster create failed ({done.returncode}):\n{tail}")

    # -- access ------------------------------------------------------------------

    def endpoint(self, ip: str, *, password: str | None = None) -> RedisEndpoint:
        """The endpoint of one node, with the cluster password unless one is given."""
        pw = password if password is not None else self.password
        tls = None
        if self.tls is not None:
            tls = RedisTls(
                ca_pem=self.tls.ca_cert.read_text(),
                cert_file=str(self.tls.cert),
                key_file=str(self.tls.key),
            )
        return RedisEndpoint(host=ip, port=self.port, password=pw, tls=tls)

    def client(self, ip: str, timeout_s: float = 2.0) -> redis.Redis:
        """A plain redis-py client to one node (no retries: fail fast, poll instead)."""
        return server_client(ip, self.port, self.security, timeout_s)

    def cluster_client(self) -> RedisCluster:
        """A cluster-aware client started from 127.0.0.2, as an application would use."""
        return RedisCluster(
            host=self.ips[0],
            port=self.port,
            password=self.password,
            decode_responses=True,
            socket_timeout=5.0,
        )

    def node(self, ip: str) -> RedisNode:
        for node in self.nodes:
            if node.ip == ip:
                return node
        raise KeyError(ip)

    def view(self, ip: str) -> dict[str, dict[str, Any]]:
        """CLUSTER NODES as node ``ip`` sees it, parsed by redis-py: ``"ip:port" -> info``."""
        with self.client(ip) as client:
            return _nodes(client)

    def layout(self, ip: str | None = None) -> dict[str, str]:
        """Master IP -> its replica's IP, as one node (default: the first) sees it."""
        view = self.view(ip or self.ips[0])
        by_id = {info["node_id"]: addr.split(":")[0] for addr, info in view.items()}
        out: dict[str, str] = {}
        for addr, info in view.items():
            if "slave" in info["flag_set"] and info["master_id"] in by_id:
                out[by_id[info["master_id"]]] = addr.split(":")[0]
        return out

    def node_id(self, ip: str) -> str:
        with self.client(ip) as client:
            return str(client.execute_command("CLUSTER", "MYID"))

    def info_replication(self, ip: str) -> dict[str, Any]:
        with self.client(ip) as client:
            info: dict[str, Any] = client.info("replication")
        return info

    def cluster_state(self, ip: str) -> str:
        with self.client(ip) as client:
            return str(client.execute_command("CLUSTER INFO")["cluster_state"])

    def cut_replication_link(self, replica_ip: str) -> None:
        """Break one replica's replication link while the cluster bus stays healthy.

        A wrong ``masterauth`` plus a killed link keeps the replica from
        reconnecting (AUTH fails), which is how a replica that cannot catch up looks.
        """
        with self.client(replica_ip) as client:
            client.config_set("masterauth", "not-the-password-" + secrets.token_hex(4))
            client.execute_command("CLIENT", "KILL", "TYPE", "master")

        def link_down() -> str | None:
            status = self.info_replication(replica_ip).get("master_link_status")
            return None if status == "down" else f"master_link_status={status}"

        wait_until(link_down, 10.0, f"{replica_ip} to lose its replication link")

    def heal_replication_link(self, replica_ip: str) -> None:
        """Undo ``cut_replication_link`` and wait until the whole cluster is healthy."""
        with self.client(replica_ip) as client:
            client.config_set("masterauth", self.password or "")
        self.wait_healthy()

    # -- health --------------------------------------------------------------------

    def health_problem(self) -> str | None:
        """What keeps the cluster from being fully healthy, or None.

        Healthy means: every node says cluster_state:ok and knows 6 nodes, every
        node's view agrees on 3 masters each with one replica, nobody is flagged
        failing or in handshake, and every replica's replication link is up.
        """
        reference: set[tuple[str, str]] | None = None
        for node in self.nodes:
            with self.client(node.ip) as client:
                info = client.execute_command("CLUSTER INFO")
                if info.get("cluster_state") != "ok":
                    return f"{node.address} cluster_state={info.get('cluster_state')}"
                if int(info.get("cluster_known_nodes", 0)) != len(self.nodes):
                    return f"{node.address} knows {info.get('cluster_known_nodes')} nodes"
                view = _nodes(client)
                repl: dict[str, Any] = client.info("replication")
            for addr, entry in view.items():
                flags = entry["flag_set"]
                bad = flags & {"fail", "fail?", "handshake", "noaddr"}
                if bad or not entry["connected"]:
                    return f"{node.address} sees {addr} as {sorted(flags)} connected={entry['connected']}"
            pairs = {
                (e["node_id"], e["master_id"]) for e in view.values() if "slave" in e["flag_set"]
            }
            if len(pairs) != len(self.nodes) // 2:
                return f"{node.address} sees {len(pairs)} master/replica pairs"
            if reference is None:
                reference = pairs
            elif pairs != reference:
                return f"{node.address} disagrees with {self.nodes[0].address} on roles"
            if repl.get("role") == "slave" and (
                repl.get("master_link_status") != "up" or repl.get("master_sync_in_progress")
            ):
                return f"{node.address} replication link {repl.get('master_link_status')}"
        return None

    def wait_healthy(self, timeout_s: float = HEALTH_TIMEOUT_S) -> None:
        """Block until ``health_problem`` reports nothing, or raise HarnessError."""
        wait_until(self.health_problem, timeout_s, "a healthy cluster (all nodes agree, links up)")

    def wait_layout(self, expected: dict[str, str], timeout_s: float = HEALTH_TIMEOUT_S) -> None:
        """Block until the cluster is healthy and every node sees ``expected`` (master -> replica).

        For tests that know a failover was accepted but not when it lands.
        """

        def problem() -> str | None:
            for node in self.nodes:
                seen = self.layout(node.ip)
                if seen != expected:
                    return f"{node.address} sees {seen}"
            return self.health_problem()

        wait_until(problem, timeout_s, f"layout {expected}")


@contextlib.contextmanager
def running_cluster(
    workdir: Path, password: str | None = None, tls: LeafFiles | None = None
) -> Iterator[RedisClusterHarness]:
    """A started cluster that is always torn down, even when the test fails."""
    reason = redis_binaries_missing()
    if reason:
        pytest.skip(reason)
    harness = RedisClusterHarness(workdir, password=password, tls=tls)
    try:
        harness.start()
        yield harness
    finally:
        harness.stop()


@pytest.fixture(scope="session")
def redis_password() -> str:
    """A per-session random password, so tests can search for it in error texts."""
    return "pw-" + secrets.token_hex(12)


@pytest.fixture
def redis_cluster(tmp_path: Path) -> Iterator[RedisClusterHarness]:
    """A fresh password-less cluster for one test (tests may change roles freely)."""
    with running_cluster(tmp_path / "redis") as harness:
        yield harness


@pytest.fixture
def redis_cluster_auth(tmp_path: Path, redis_password: str) -> Iterator[RedisClusterHarness]:
    """A fresh cluster with ``requirepass``/``masterauth`` set to ``redis_password``."""
    with running_cluster(tmp_path / "redis", password=redis_password) as harness:
        yield harness


@pytest.fixture(scope="module")
def redis_cluster_shared(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[RedisClusterHarness]:
    """One password-less cluster per test module, for tests that only read or restore."""
    with running_cluster(tmp_path_factory.mktemp("redis-shared")) as harness:
        yield harness


@pytest.fixture
def redis_tls(tmp_path: Path) -> LeafFiles:
    """A CA and the certificate every server (and the chart's own clients) uses, as a
    kubernetes.io/tls Secret holds them; no pod IP is named in it, as in the deployments'."""
    from tests.tls_material import make_authority, write_leaf

    return write_leaf(
        tmp_path / "tls", make_authority("redis-ca"), "cache", dns=["cache-headless.default.svc"]
    )


@pytest.fixture
def redis_cluster_tls(
    tmp_path: Path, redis_password: str, redis_tls: LeafFiles
) -> Iterator[RedisClusterHarness]:
    """A fresh cluster serving TLS only, client certificates required, with a password."""
    with running_cluster(tmp_path / "redis", password=redis_password, tls=redis_tls) as harness:
        yield harness
