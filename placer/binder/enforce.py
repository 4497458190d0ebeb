"""Enforcement off the decision loop: shards bound (or pinned) by a bounded pool of threads.

kube-scheduler binds in a goroutine per pod beside the next scheduling cycle; here each shard is
one job, its pods written in order and the job stopping at its first failure (the rest of the
shard then waits for a fresh solve), while up to ``concurrency`` shards are written at once. The
loop hands a batch over and goes on solving the next one; finished shards come back through
``completed`` and wake the loop.
"""

import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from placer.binder.background import Text
from placer.binder.cache import PodKey

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Placement:
    """One pod of a plan: where it goes and as what."""

    key: PodKey
    pod: dict[str, Any]
    """The pod as the plan saw it (its uid and resourceVersion are the write's preconditions)."""
    node: str
    role: str


@dataclass(frozen=True)
class ShardJob:
    shard: str
    batch: str
    placements: tuple[Placement, ...]
    why: Text
    """What the Scheduled event says besides the node: the batch's figures (made when the
    first of the shard's Events is sent)."""


@dataclass
class ShardOutcome:
    shard: str
    batch: str
    bound: list[tuple[str, str]] = field(default_factory=list)
    found: list[tuple[str, str]] = field(default_factory=list)
    """Of ``bound``, those the server had bound there already (a 409 naming our node)."""
    failed: list[tuple[str, str]] = field(default_factory=list)
    error: BaseException | None = None
    """An exception that stopped the shard (a bug, or a connection that broke mid-request)."""

    @property
    def complete(self) -> bool:
        return not self.failed


class Enforcer:
    """Runs shard jobs on at most ``concurrency`` threads; thread-safe."""

    def __init__(self, concurrency: int = 16, on_done: Callable[[], None] | None = None) -> None:
        if concurrency < 1:
            raise ValueError("concurrency must be at least 1")
        self.concurrency = concurrency
        self.on_done = on_done
        self._pool = ThreadPoolExecutor(max_workers=concurrency, thread_name_prefix="enforce")
        self._lock = threading.Lock()
        self._idle = threading.Condition(self._lock)
        self._done: list[ShardOutcome] = []
        self._queued_pods = 0
        self._running_pods = 0
        self._jobs = 0
        self._seconds_per_pod: float | None = None
        """One thread's seconds per pod written, averaged over recent shards (None: none yet)."""

    def submit(self, job: ShardJob, run: Callable[[ShardJob], ShardOutcome]) -> None:
        size = len(job.placements)
        with self._lock:
            self._jobs += 1
            self._queued_pods += size

        def work() -> ShardOutcome:
            with self._lock:
                self._queued_pods -= size
                self._running_pods += size
            started = time.monotonic()
            try:
                return run(job)
            except Exception as exc:  # a bug must not lose the shard: it is solved again
                log.exception("enforcing shard %s failed", job.shard)
                reason = f"error: {type(exc).__name__}: {exc}"
                failed = [(_name(p.key), reason) for p in job.placements]
                return ShardOutcome(job.shard, job.batch, failed=failed, error=exc)
            finally:
                self._learn(size, time.monotonic() - started)

        future = self._pool.submit(work)
        future.add_done_callback(lambda f: self._finished(f, size))

    def _finished(self, future: "Future[ShardOutcome]", size: int) -> None:
        outcome = future.result()
        with self._lock:
            self._done.append(outcome)
            self._running_pods -= size
            self._jobs -= 1
            if self._jobs == 0:
                self._idle.notify_all()
        if self.on_done is not None:
            self.on_done()

    def completed(self) -> list[ShardOutcome]:
        """Outcomes finished since the last call, in the order they finished."""
        with self._lock:
            done, self._done = self._done, []
            return done

    @property
    def busy(self) -> bool:
        with self._lock:
            return self._jobs > 0

    @property
    def backlog_pods(self) -> int:
        """Pods handed over whose shard has not started yet."""
        with self._lock:
            return self._queued_pods

    @property
    def pending_pods(self) -> int:
        """Pods handed over and not finished: waiting or being written."""
        with self._lock:
            return self._queued_pods + self._running_pods

    def _learn(self, pods: int, seconds: float) -> None:
        if pods <= 0:
            return
        sample = seconds / pods
        with self._lock:
            known = self._seconds_per_pod
            self._seconds_per_pod = sample if known is None else known + 0.2 * (sample - known)

    def drain_seconds(self) -> float | None:
        """How long the pods handed over will take to be written, at the pace of recent
        shards with every thread busy; None before any shard has been written."""
        with self._lock:
            if self._seconds_per_pod is None:
                return None
            pending = self._queued_pods + self._running_pods
            return pending * self._seconds_per_pod / self.concurrency

    def wait(self, timeout: float | None = None) -> bool:
        """Until every job handed over has finished; False if ``timeout`` passed first."""
        with self._idle:
            return self._idle.wait_for(lambda: self._jobs == 0, timeout)


def _name(key: PodKey) -> str:
    return f"{key[0]}/{key[1]}"
