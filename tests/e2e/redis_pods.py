"""Real ``redis-server`` processes behind the pods of the e2e control plane.

What a kubelet and its container runtime would do for a Redis pod, no more: when a pod is bound
(and its node is up) one ``redis-server`` starts on the pod's own IP (a 127.x address, every one
of which is loopback) and port 6379, announcing that IP as the deployments do, with its data
folder (``nodes.conf`` and an append-only file) kept per pod name as a PersistentVolumeClaim
keeps it across restarts; a pod deleted stops its server; a
node lost kills the servers on it (SIGKILL) and a node back starts them again on the same IP.
Each Redis cluster is then formed the way its deployment forms it (``tests.e2e.formation``).
"""

from __future__ import annotations

import contextlib
import random
import signal
import subprocess
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import redis

from tests.redis_servers import RedisSecurity, client, server_config, spawn_server

REDIS_PORT = 6379
NODE_TIMEOUT_MS = 2000
START_TIMEOUT_S = 20.0


@dataclass
class RedisPod:
    """One pod's server: where it listens and where its data lives."""

    key: str
    """``namespace/name``."""
    uid: str
    ip: str
    folder: Path
    proc: subprocess.Popen[bytes] | None = None

    @property
    def address(self) -> str:
        return f"{self.ip}:{REDIS_PORT}"

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def log_tail(self, lines: int = 20) -> str:
        with contextlib.suppress(OSError):
            text = (self.folder / "redis.log").read_text(errors="replace")
            return "\n".join(text.splitlines()[-lines:])
        return "(no log)"


class RedisPods:
    """The servers of one test's pods, all sharing one security setting (password, TLS)."""

    def __init__(
        self,
        workdir: Path,
        security: RedisSecurity | None = None,
        node_timeout_ms: int = NODE_TIMEOUT_MS,
    ) -> None:
        self.workdir = workdir
        self.security = security or RedisSecurity()
        self.node_timeout_ms = node_timeout_ms
        # A block of 127.B.x.y of our own: other tests' servers never share an address.
        self._block = random.SystemRandom().randrange(100, 250)
        self._next = 0
        self._lock = threading.RLock()
        self.pods: dict[str, RedisPod] = {}
        self.stopping: dict[str, RedisPod] = {}
        """Servers of deleted pods still shutting down (``terminate``), by ``namespace/name``."""

    def _new_ip(self) -> str:
        self._next += 1
        return f"127.{self._block}.{self._next // 250}.{self._next % 250 + 1}"

    def start(self, key: str, uid: str) -> str:
        """The pod's server, started for this pod (a new incarnation gets a new IP, the same
        data folder); returns the pod IP."""
        with self._lock:
            pod = self.pods.get(key)
            if pod is not None and pod.uid == uid:
                if not pod.alive():
                    self._spawn(pod)
                return pod.ip
            if pod is not None:
                self._kill(pod, signal.SIGTERM)
            folder = self.workdir / key.replace("/", "_")
            pod = RedisPod(key=key, uid=uid, ip=self._new_ip(), folder=folder)
            self.pods[key] = pod
            self._spawn(pod)
            return pod.ip

    def _spawn(self, pod: RedisPod) -> None:
        config = server_config(
            pod.ip,
            REDIS_PORT,
            pod.folder,
            node_timeout_ms=self.node_timeout_ms,
            security=self.security,
            persistent=True,
        )
        pod.proc = spawn_server(config, pod.folder)
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            if pod.proc.poll() is not None:
                raise RuntimeError(f"redis-server of {pod.key} exited:\n{pod.log_tail()}")
            try:
                with self.client(pod.ip) as c:
                    c.ping()
                return
            except (redis.RedisError, OSError):
                if time.monotonic() > deadline:
                    raise RuntimeError(
                        f"redis-server of {pod.key} never answered:\n{pod.log_tail()}"
                    ) from None
                time.sleep(0.05)

    def _kill(self, pod: RedisPod, sig: signal.Signals) -> None:
        if pod.proc is not None and pod.proc.poll() is None:
            pod.proc.send_signal(sig)
            with contextlib.suppress(subprocess.TimeoutExpired):
                pod.proc.wait(timeout=10)
            if pod.proc.poll() is None:
                pod.proc.kill()
                pod.proc.wait(timeout=10)

    def stop(self, key: str) -> None:
        """The pod is gone: its server shuts down (SIGTERM, as a kubelet stops a container)."""
        with self._lock:
            pod = self.pods.pop(key, None)
            if pod is not None:
                self._kill(pod, signal.SIGTERM)

    def terminate(self, key: str, uid: str, grace_s: float) -> str:
        """The pod ``key`` of ``uid`` stops as a kubelet stops its container: SIGTERM, then
        SIGKILL once ``grace_s`` has passed. Waits outside the lock (other pods start and stop
        meanwhile); returns how it ended (``exited``, ``killed``, ``absent``)."""
        with self._lock:
            pod = self.pods.get(key)
            if pod is None or pod.uid != uid:
                return "absent"
            del self.pods[key]
            self.stopping[key] = pod
        try:
            proc = pod.proc
            if proc is None or proc.poll() is not None:
                return "exited"
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=max(grace_s, 0.0))
                return "exited"
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=10)
                return "killed"
        finally:
            with self._lock:
                self.stopping.pop(key, None)

    def crash(self, keys: list[str]) -> None:
        """Servers lost with their node: SIGKILL, no goodbye to the cluster."""
        with self._lock:
            for key in keys:
                if key in self.pods:
                    self._kill(self.pods[key], signal.SIGKILL)

    def revive(self, keys: list[str]) -> None:
        """The node is back: the same pods' servers start again, same IP, same data."""
        with self._lock:
            for key in keys:
                pod = self.pods.get(key)
                if pod is not None and not pod.alive():
                    self._spawn(pod)

    def close(self) -> None:
        with self._lock:
            for pod in self.pods.values():
                self._kill(pod, signal.SIGKILL)
            self.pods.clear()

    def ip(self, key: str) -> str:
        return self.pods[key].ip

    def client(self, ip: str, timeout_s: float = 2.0) -> redis.Redis:
        return client(ip, REDIS_PORT, self.security, timeout_s)

    def alive(self, key: str) -> bool:
        pod = self.pods.get(key)
        return pod is not None and pod.alive()

    def running(self, key: str) -> bool:
        """A process of ``key`` runs: its pod's, or a deleted one's still shutting down."""
        stopping = self.stopping.get(key)
        return self.alive(key) or (stopping is not None and stopping.alive())
