"""A client that writes all along and remembers only what Redis acknowledged as replicated.

Each key is written with ``SET`` and ``WAIT 1`` on the same connection to the master of its
slot: a write counts as acknowledged only when ``WAIT`` says a replica has it. Losing a zone may
fail writes (not acknowledged: not counted); it must never lose an acknowledged one, because
Redis promotes a replica that has it. ``lost()`` reads every acknowledged key back.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Sequence

import redis
from redis.crc import key_slot

from tests.e2e.redis_pods import REDIS_PORT, RedisPods

WAIT_MS = 200


class AckedWriter:
    def __init__(self, pods: RedisPods, seeds: Sequence[str], period_s: float = 0.01) -> None:
        self.pods = pods
        self.seeds = list(seeds)
        self.period_s = period_s
        self.acked: dict[str, str] = {}
        self.failed = 0
        self.written = 0
        """SETs the master took, acknowledged by a replica or not (a shard whose replicas are
        lost cannot acknowledge, and still serves)."""
        self._slots: list[tuple[int, int, str]] = []
        self._clients: dict[str, redis.Redis] = {}
        self._stop = threading.Event()
        self._lock = threading.Lock()
        """One caller at a time: the writer thread, or a test reading back."""
        self._thread = threading.Thread(target=self._run, name="acked-writer", daemon=True)
        self._n = 0
        self.error = ""

    def __enter__(self) -> AckedWriter:
        self._refresh()
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=30)
        for c in self._clients.values():
            with contextlib.suppress(Exception):
                c.close()

    def _client(self, ip: str) -> redis.Redis:
        if ip not in self._clients:
            self._clients[ip] = self.pods.client(ip, timeout_s=1.0)
        return self._clients[ip]

    def _refresh(self) -> bool:
        """The slot map from the first node that answers CLUSTER SLOTS."""
        for ip in [*self.seeds, *self._clients]:
            try:
                slots = self._client(ip).execute_command("CLUSTER", "SLOTS")
            except (redis.RedisError, OSError):
                self._drop(ip)
                continue
            table = []
            for entry in slots:
                lo, hi, master = int(entry[0]), int(entry[1]), entry[2]
                table.append((lo, hi, str(master[0])))
            if table:
                self._slots = table
                return True
        return False

    def _drop(self, ip: str) -> None:
        found = self._clients.pop(ip, None)
        if found is not None:
            with contextlib.suppress(Exception):
                found.close()

    def _master_of(self, key: str) -> str | None:
        slot = key_slot(key.encode())
        for lo, hi, ip in self._slots:
            if lo <= slot <= hi:
                return ip
        return None

    def write(self, key: str, value: str) -> bool | None:
        """True: acknowledged by a replica; False: written, no replica said so (a shard left
        without replicas); None: not written (no master known, or it failed)."""
        ip = self._master_of(key)
        if ip is None:
            self._refresh()
            return None
        try:
            pipe = self._client(ip).pipeline(transaction=False)
            pipe.set(key, value)
            pipe.execute_command("WAIT", 1, WAIT_MS)
            _, replicas = pipe.execute()
        except (redis.RedisError, OSError):
            self._drop(ip)
            self._refresh()
            return None
        self.written += 1
        if int(replicas) >= 1:
            self.acked[key] = value
            return True
        return False

    def status(self) -> str:
        alive = "alive" if self._thread.is_alive() else f"dead ({self.error})"
        masters = sorted({ip for _, _, ip in self._slots})
        return (
            f"writer {alive}: {self._n} writes, {self.written} taken, {len(self.acked)} "
            f"acknowledged, {self.failed} failed; masters {masters}"
        )

    def _run(self) -> None:
        try:
            self._loop()
        except Exception as exc:  # shown by status(): a test must not wait on a dead writer
            self.error = f"{type(exc).__name__}: {exc}"

    def _loop(self) -> None:
        while not self._stop.is_set():
            self._n += 1
            key = f"k{self._n}"
            with self._lock:
                written = self.write(key, f"v{self._n}-{time.monotonic_ns()}")
            if written is None:
                self.failed += 1
                self._stop.wait(0.1)
            else:
                self._stop.wait(self.period_s)

    def lost(self) -> list[str]:
        """Acknowledged keys that read back missing or changed (from the masters now)."""
        with self._lock:
            return self._lost()

    def _lost(self) -> list[str]:
        self._refresh()
        missing = []
        for key, value in list(self.acked.items()):
            ip = self._master_of(key)
            try:
                got = self._client(ip).get(key) if ip else None
            except (redis.RedisError, OSError):
                got = None
            if got != value:
                missing.append(key)
        return missing

    def acknowledged_since(self, count: int) -> int:
        return len(self.acked) - count


def seeds_of(pods: RedisPods, keys: Sequence[str]) -> list[str]:
    return [pods.ip(k) for k in keys if k in pods.pods]


__all__ = ["REDIS_PORT", "AckedWriter", "seeds_of"]
