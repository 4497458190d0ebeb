"""The pieces of the fault drills (test_fault_drills_e2e.py): a rollout that keeps arriving
whatever the API server does, a probe of a binder's /readyz and /metrics, and what they saw.

Every figure is measured, not assumed: times are ``time.time()`` on this machine, taken by the
probe (every 0.1 s) or by the drill around what it did, and reported with each drill's outcome.
"""

from __future__ import annotations

import contextlib
import re
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from kubernetes.client import ApiClient, CoreV1Api
from kubernetes.client.exceptions import ApiException

from models.kube_objects import SHARD_SIZE_ANNOTATION
from models.policy import Policy
from placer.binder.config import PLACEMENT_GATE
from tests.e2e.control_plane import json_of

POLICY = Policy()
MEMBERS = 3
DRILL_LABEL = "fault-drill"
"""Nodes of the drills carry it; only the drills' pods select them."""
Pod = dict[str, Any]


def pod_body(cluster: str, shard: int, index: int, run_id: str, enforce: str) -> Pod:
    """A pending member of ``shard``, without a role (the solver picks the master): for the
    binder by schedulerName (bind) or by the placement gate (gate; kube-scheduler binds)."""
    labels = {**POLICY.selector, POLICY.labels.cluster: cluster, POLICY.labels.shard: str(shard)}
    spec: dict[str, Any] = {
        "nodeSelector": {DRILL_LABEL: run_id},
        "terminationGracePeriodSeconds": 0,
        "containers": [
            {
                "name": "redis",
                "image": "redis:7.2",
                "resources": {"requests": {"cpu": "100m", "memory": "256Mi"}},
            }
        ],
    }
    if enforce == "gate":
        spec["schedulingGates"] = [{"name": PLACEMENT_GATE}]
    else:
        spec["schedulerName"] = POLICY.scheduler_name
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": f"{cluster}-{shard}-{index}",
            "labels": labels,
            "annotations": {SHARD_SIZE_ANNOTATION: str(MEMBERS)},
        },
        "spec": spec,
    }


@dataclass
class Rollout:
    """Creates ``shards`` shards of ``MEMBERS`` pods in a thread, in order, each create tried
    again until the server has it (a 409 AlreadyExists after a lost answer counts as made), so
    the rollout goes on through an outage as a controller's would."""

    api: ApiClient
    namespace: str
    cluster: str
    run_id: str
    enforce: str
    shards: int
    pause: Callable[[int], float] = lambda shard: 0.0
    """Seconds to wait before creating ``shard`` (waves)."""
    created: int = 0
    failed_creates: int = 0
    done: threading.Event = field(default_factory=threading.Event)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    @property
    def total(self) -> int:
        return self.shards * MEMBERS

    def start(self) -> Rollout:
        self._thread = threading.Thread(target=self._run, name="rollout", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=60)

    def _run(self) -> None:
        core = CoreV1Api(self.api)
        for shard in range(self.shards):
            wait = self.pause(shard)
            if wait and self._stop.wait(wait):
                return
            for index in range(MEMBERS):
                body = pod_body(self.cluster, shard, index, self.run_id, self.enforce)
                while not self._stop.is_set():
                    try:
                        json_of(
                            core.create_namespaced_pod(
                                self.namespace,
                                body,  # type: ignore[arg-type]
                                _preload_content=False,
                                _request_timeout=10,
                            )
                        )
                        break
                    except ApiException as exc:
                        if exc.status == 409:
                            break  # made; the answer was lost
                        self.failed_creates += 1
                    except Exception:  # connection refused, reset, timeout: the server is away
                        self.failed_creates += 1
                    self._stop.wait(0.5)
                else:
                    return
                self.created += 1
        self.done.set()


METRIC_LINE = re.compile(r"^(redis_placer_[a-z_]+)(\{[^}]*\})? ([0-9.eE+-]+|NaN)$")


def read_metrics(text: str) -> dict[str, float]:
    """``name{labels}`` -> value, from Prometheus' text format."""
    values = {}
    for line in text.splitlines():
        found = METRIC_LINE.match(line)
        if found:
            values[found.group(1) + (found.group(2) or "")] = float(found.group(3))
    return values


BOUND = 'redis_placer_binds_total{result="bound"}'
LEADER = "redis_placer_leader"
READABLE = "redis_placer_cluster_readable"
UNREADABLE = "redis_placer_cluster_unreadable_total"
EXPIRED_PODS = 'redis_placer_watch_expired_total{watch="pods"}'
EXPIRED_NODES = 'redis_placer_watch_expired_total{watch="nodes"}'


@dataclass(frozen=True)
class Sample:
    at: float
    ready: bool | None
    """/readyz: True 200, False 503, None no answer (the process is gone)."""
    metrics: dict[str, float]

    def get(self, name: str) -> float:
        return self.metrics.get(name, 0.0)


class Probe:
    """Reads a binder's /readyz and /metrics every ``period`` seconds, as a kubelet's readiness
    probe and Prometheus would, and keeps every sample."""

    def __init__(self, port: int, period: float = 0.1) -> None:
        self.base = f"http://127.0.0.1:{port}"
        self.period = period
        self.samples: list[Sample] = []
        self._stop = threading.Event()
        self._opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        self._thread = threading.Thread(target=self._run, name="probe", daemon=True)

    def __enter__(self) -> Probe:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=10)

    def _get(self, path: str) -> tuple[int, str] | None:
        try:
            with self._opener.open(self.base + path, timeout=2) as resp:
                return int(resp.status), resp.read().decode()
        except urllib.error.HTTPError as exc:
            return int(exc.code), exc.read().decode()
        except OSError:
            return None

    def sample(self) -> Sample:
        ready = self._get("/readyz")
        metrics = self._get("/metrics")
        return Sample(
            time.time(),
            None if ready is None else ready[0] == 200,
            read_metrics(metrics[1]) if metrics is not None else {},
        )

    def _run(self) -> None:
        while not self._stop.is_set():
            self.samples.append(self.sample())
            self._stop.wait(self.period)

    def last(self) -> Sample:
        return self.samples[-1] if self.samples else self.sample()

    def answered(self) -> Sample:
        """The last sample the binder answered (after it stopped, the last before)."""
        return next((s for s in reversed(self.samples) if s.ready is not None), self.last())

    def bound(self) -> float:
        return self.last().get(BOUND)

    def between(self, start: float, end: float = float("inf")) -> list[Sample]:
        return [s for s in list(self.samples) if start <= s.at <= end]

    def first_after(self, start: float, check: Callable[[Sample], bool]) -> Sample | None:
        return next((s for s in self.between(start) if check(s)), None)


def wait_for(check: Callable[[], bool], timeout: float, interval: float = 0.1) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(Exception):
            if check():
                return True
        time.sleep(interval)
    with contextlib.suppress(Exception):
        return bool(check())
    return False


@dataclass
class Outcome:
    """What one drill measured, printed with its command and written to docs/benchmarks.md."""

    drill: str
    figures: dict[str, Any] = field(default_factory=dict)

    def __setitem__(self, key: str, value: Any) -> None:
        self.figures[key] = value

    def line(self) -> str:
        shown = ", ".join(
            f"{k} {v:.2f}" if isinstance(v, float) else f"{k} {v}" for k, v in self.figures.items()
        )
        return f"DRILL {self.drill}: {shown}"
