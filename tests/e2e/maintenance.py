"""Planned disruptions on real Redis, measured: drains, a node-pool upgrade, rolling restarts.

The pieces the maintenance end-to-end tests and ``benchmarks.maintenance`` share:

- ``CHARTS``: each deployment's readiness probe, preStop hook and grace period, from its own
  sources (the bitnami chart's ``ping_readiness_local.sh``, the OT operator's generated probe and
  its cluster preStop that hands the master role to the replica with the highest offset, the
  valkey-io operator's ``readiness-check.sh``), for ``tests.e2e.kubelet.Lifecycle``;
- ``Watch``: one writer per shard doing ``SET`` + ``WAIT 1`` all along (the longest gap between
  two writes a master took is the shard's outage; an acknowledged write is one a replica has),
  and a poller of ``CLUSTER INFO`` / ``CLUSTER NODES`` on every live server (seconds of
  ``cluster_state:fail``, master changes, seconds a shard had no running server at all);
- ``Drainer``: ``kubectl drain`` as it does it: cordon, then one eviction per pod through the
  Eviction API, each retried every 5 s on HTTP 429, then waiting for the pods to be gone;
- ``upgrade_zone`` and ``rollout_restart``: a node pool replaced zone-wide, node by node, and
  ``kubectl rollout restart`` of StatefulSets;
- ``zone_survival``: the checker's verdict (``solver.survival``) on a snapshot of the live
  cluster with the roles Redis reports, and Redis's own view beside it;
- ``webhook_material`` / ``route_webhook``: the guard's ValidatingWebhookConfiguration pointed at
  ``https://127.0.0.1:PORT/validate`` (no Service routes in this harness) with a serving
  certificate for both the Service's names and 127.0.0.1.
"""

from __future__ import annotations

import base64
import contextlib
import datetime as dt
import ipaddress
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import redis
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID
from kubernetes.client import ApiClient, AppsV1Api, CoreV1Api
from kubernetes.client.exceptions import ApiException
from redis.crc import key_slot

from models.cluster import Role
from models.policy import Policy
from tests.e2e.control_plane import create_node, json_of
from tests.e2e.kubelet import Lifecycle, Probe
from tests.e2e.redis_pods import REDIS_PORT, RedisPods

KUBECTL_RETRY_S = 5.0
"""kubectl drain retries an eviction refused with HTTP 429 every 5 s."""
WAIT_MS = 100
NODE_TIMEOUT_MS = 5000


# -- the charts' probes and hooks ------------------------------------------------------------


def ping_passes(runtime: RedisPods, key: str) -> bool:
    """``redis-cli ping`` answers PONG: the probe all three deployments use (none waits for the
    replica to be in sync)."""
    with runtime.client(runtime.ip(key), timeout_s=1.0) as c:
        return bool(c.ping())


_CLUSTER_CHECKED: set[tuple[str, str]] = set()
"""Pods (key, uid) whose readiness check once found cluster_state:ok."""


def ping_then_cluster_ok(runtime: RedisPods, key: str) -> bool:
    """hyperspike's ping_readiness_local.sh: PING answers PONG, and until a check of this pod
    once found ``cluster_state:ok`` (the script then touches /tmp/.valkey_cluster_check, which
    a new pod does not have), ``CLUSTER INFO`` must say so too."""
    with runtime.client(runtime.ip(key), timeout_s=1.0) as c:
        if not c.ping():
            return False
        pod = runtime.pods.get(key)
        incarnation = (key, pod.uid if pod is not None else "")
        if incarnation in _CLUSTER_CHECKED:
            return True
        if str(c.execute_command("CLUSTER", "INFO")).find("cluster_state:ok") < 0:
            return False
    _CLUSTER_CHECKED.add(incarnation)
    return True


def ot_cluster_pre_stop(runtime: RedisPods, key: str) -> str:
    """The OT operator's preStop for cluster pods: when this server is a master, ``CLUSTER
    FAILOVER`` on the replica its ``INFO replication`` lists with the highest offset (the
    command returns at once; the hook does not wait for the failover)."""
    with runtime.client(runtime.ip(key), timeout_s=2.0) as c:
        info = c.info("replication")
    if info.get("role") != "master":
        return "a replica: nothing"
    best, offset = None, -1
    for name, value in info.items():
        if (
            name.startswith("slave")
            and isinstance(value, dict)
            and int(value.get("offset", 0)) > offset
        ):
            best, offset = str(value.get("ip")), int(value.get("offset", 0))
    if best is None:
        return "a master with no replica: nothing"
    with runtime.client(best, timeout_s=2.0) as c:
        c.execute_command("CLUSTER", "FAILOVER")
    return f"CLUSTER FAILOVER sent to {best}"


@dataclass(frozen=True)
class Chart:
    """What a deployment's pod template says about stopping and readiness."""

    readiness: Probe
    pre_stop: Callable[[RedisPods, str], Any] | None
    grace_s: int
    source: str

    def lifecycle(
        self, start_delay_s: float, attach_delay_s: float, probe_scale: float = 1.0
    ) -> Lifecycle:
        return Lifecycle(
            start_delay_s=start_delay_s,
            attach_delay_s=attach_delay_s,
            readiness=self.readiness,
            pre_stop=self.pre_stop,
            probe_scale=probe_scale,
        )


CHARTS = {
    # bitnami/redis-cluster: readinessProbe exec ping_readiness_local.sh (PING == PONG),
    # initialDelaySeconds 5, periodSeconds 5, failureThreshold 5; no preStop; the pod's grace
    # period is Kubernetes' default.
    "bitnami": Chart(
        Probe(ping_passes, initial_delay_s=5, period_s=5, failure_threshold=5),
        None,
        30,
        "bitnami/redis-cluster templates: ping_readiness_local.sh",
    ),
    # OT redis-operator: the probe it generates when the CR sets none is `redis-cli ping`,
    # with the CRD's defaults (initialDelaySeconds 1, periodSeconds 10, failureThreshold 3);
    # cluster pods get a preStop that fails the master over to its best replica.
    "ot-operator": Chart(
        Probe(ping_passes, initial_delay_s=1, period_s=10, failure_threshold=3),
        ot_cluster_pre_stop,
        30,
        "OT redis-operator pkg/k8sutils/statefulset.go: getProbeInfo, generateClusterPreStop",
    ),
    # valkey-io valkey-operator: readiness-check.sh (PING == PONG), initialDelaySeconds 5,
    # periodSeconds 5, failureThreshold 5. Its servers run `shutdown-on-sigterm failover`, a
    # Valkey setting redis-server does not have: here SIGTERM shuts down as Redis does.
    "valkey-io": Chart(
        Probe(ping_passes, initial_delay_s=5, period_s=5, failure_threshold=5),
        None,
        30,
        "valkey-io valkey-operator valkeynode_resources.go, scripts/readiness-check.sh",
    ),
    # hyperspike valkey-operator: readinessProbe exec ping_readiness_local.sh (PING == PONG,
    # and cluster_state:ok until that has been seen once), initialDelaySeconds 5,
    # periodSeconds 5, failureThreshold 5; no preStop; the pod's grace period is Kubernetes'
    # default.
    "hyperspike": Chart(
        Probe(ping_then_cluster_ok, initial_delay_s=5, period_s=5, failure_threshold=5),
        None,
        30,
        "hyperspike valkey-operator internal/controller/valkey_controller.go, "
        "scripts/ping_readiness_local.sh",
    ),
}


def with_grace(sts: dict[str, Any], seconds: int) -> dict[str, Any]:
    sts["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] = seconds
    return sts


# -- what the clients see ----------------------------------------------------------------------


@dataclass(frozen=True)
class Shard:
    """A shard by its slots and the pods that hold it."""

    index: int
    lo: int
    hi: int
    members: tuple[str, ...]
    """``namespace/name`` of its master and replicas at formation."""


def shards_of(runtime: RedisPods, seed_ips: Sequence[str], members: int) -> list[Shard]:
    """Each master's first slot range (CLUSTER SLOTS) and its pods (CLUSTER NODES: the master
    and every node replicating it), as the first answering server sees them; every shard must
    show ``members`` pods."""
    from tests.e2e.formation import topology

    key_of = {p.ip: k for k, p in runtime.pods.items()}
    top = topology(runtime, seed_ips)
    for ip in seed_ips:
        try:
            with runtime.client(ip) as c:
                slots = c.execute_command("CLUSTER", "SLOTS")
        except (redis.RedisError, OSError):
            continue
        out: list[Shard] = []
        seen: set[str] = set()
        for entry in sorted(slots, key=lambda e: int(e[0])):
            master = str(entry[2][0])
            if master in seen:
                continue
            seen.add(master)
            ips = [master, *top.masters.get(master, [])]
            pods = tuple(key_of[i] for i in ips if i in key_of)
            assert len(pods) == members, f"shard of {master}: {pods} ({top.masters})"
            out.append(Shard(len(out), int(entry[0]), int(entry[1]), pods))
        return out
    raise AssertionError("no server answered CLUSTER SLOTS")


def _tag_for(lo: int, hi: int) -> str:
    for i in range(100_000):
        tag = f"t{i}"
        if lo <= key_slot(f"{{{tag}}}".encode()) <= hi:
            return tag
    raise AssertionError(f"no hash tag in slots {lo}-{hi}")


class ShardWriter:
    """Writes one shard's slot all along, following MOVED as a cluster client does."""

    def __init__(self, runtime: RedisPods, shard: Shard, stop: threading.Event) -> None:
        self.runtime = runtime
        self.shard = shard
        self.tag = _tag_for(shard.lo, shard.hi)
        self.stop = stop
        self.acked: dict[str, str] = {}
        self.written = 0
        self.failed = 0
        self.last_ok = time.monotonic()
        self.gaps: list[tuple[float, float]] = []
        """(from, to) of each stretch longer than 0.1 s between two writes the master took."""
        self.lock = threading.Lock()
        self._master: str | None = None
        self._clients: dict[str, redis.Redis] = {}
        self._n = 0
        self.thread = threading.Thread(target=self._run, name=f"writer-{shard.index}", daemon=True)

    def _client(self, ip: str) -> redis.Redis:
        if ip not in self._clients:
            self._clients[ip] = self.runtime.client(ip, timeout_s=2.0)
        return self._clients[ip]

    def _drop(self, ip: str) -> None:
        found = self._clients.pop(ip, None)
        if found is not None:
            with contextlib.suppress(Exception):
                found.close()

    def _find_master(self) -> str | None:
        slot = key_slot(f"{{{self.tag}}}".encode())
        for pod in list(self.runtime.pods.values()):
            if not pod.alive():
                continue
            try:
                with self.runtime.client(pod.ip, timeout_s=0.5) as c:
                    slots = c.execute_command("CLUSTER", "SLOTS")
            except (redis.RedisError, OSError):
                continue
            for entry in slots:
                if int(entry[0]) <= slot <= int(entry[1]):
                    return str(entry[2][0])
        return None

    def _run(self) -> None:
        while not self.stop.is_set():
            if self._master is None:
                self._master = self._find_master()
                if self._master is None:
                    self.stop.wait(0.05)
                    continue
            self._n += 1
            key, value = f"{{{self.tag}}}:{self._n}", f"v{self._n}"
            ip = self._master
            try:
                pipe = self._client(ip).pipeline(transaction=False)
                pipe.set(key, value)
                pipe.execute_command("WAIT", 1, WAIT_MS)
                _, replicas = pipe.execute()
            except redis.ResponseError as exc:
                self.failed += 1
                text = str(exc)
                if text.startswith("MOVED"):
                    self._master = text.split()[2].rsplit(":", 1)[0]
                else:
                    self._master = None
                    self.stop.wait(0.02)
                continue
            except (redis.RedisError, OSError):
                self.failed += 1
                self._drop(ip)
                self._master = None
                self.stop.wait(0.05)
                continue
            now = time.monotonic()
            with self.lock:
                if now - self.last_ok > 0.1:
                    self.gaps.append((self.last_ok, now))
                self.last_ok = now
                self.written += 1
                if int(replicas) >= 1:
                    self.acked[key] = value
            self.stop.wait(0.01)

    def longest_outage(self, since: float, until: float | None = None) -> float:
        """The longest stretch in [since, until] with no write taken (one still open counts)."""
        end = time.monotonic() if until is None else until
        with self.lock:
            spans = [*self.gaps, (self.last_ok, end)]
        longest = 0.0
        for a, b in spans:
            a, b = max(a, since), min(b, end)
            longest = max(longest, b - a)
        return longest

    def lost(self) -> list[str]:
        """Acknowledged keys that read back missing or changed from the shard's master now."""
        with self.lock:
            acked = dict(self.acked)
        master = self._find_master()
        if master is None:
            return sorted(acked)
        missing = []
        with self.runtime.client(master, timeout_s=5.0) as c:
            keys = list(acked)
            for i in range(0, len(keys), 500):
                chunk = keys[i : i + 500]
                for key, got in zip(chunk, c.mget(chunk), strict=True):
                    if got != acked[key]:
                        missing.append(key)
        return missing


@dataclass
class Window:
    """What one scenario did to the clients, measured between ``begin`` and ``end``."""

    began: float
    ended: float = 0.0
    outage_s: dict[int, float] = field(default_factory=dict)
    fail_any_s: float = 0.0
    fail_majority_s: float = 0.0
    failovers: int = 0
    no_member_s: dict[int, float] = field(default_factory=dict)

    @property
    def longest_outage_s(self) -> float:
        return max(self.outage_s.values(), default=0.0)

    @property
    def shards_without_a_member(self) -> int:
        return sum(1 for s in self.no_member_s.values() if s > 0)


class Watch:
    """Per-shard writers and a poller of every live server, for the whole test."""

    def __init__(self, runtime: RedisPods, shards: Sequence[Shard], poll_s: float = 0.2) -> None:
        self.runtime = runtime
        self.shards = list(shards)
        self.poll_s = poll_s
        self.stop = threading.Event()
        self.writers = [ShardWriter(runtime, s, self.stop) for s in self.shards]
        self.fail_any_s = 0.0
        self.fail_majority_s = 0.0
        self.failovers = 0
        self.no_member_s = {s.index: 0.0 for s in self.shards}
        self.no_member_events: list[tuple[float, int]] = []
        self.masters: dict[int, str] = {}
        self.lock = threading.Lock()
        self._poller = threading.Thread(target=self._poll, name="state-poller", daemon=True)

    def __enter__(self) -> Watch:
        for w in self.writers:
            w.thread.start()
        self._poller.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        for w in self.writers:
            w.thread.join(timeout=10)
        self._poller.join(timeout=10)

    def _poll(self) -> None:
        last = time.monotonic()
        while not self.stop.is_set():
            self.stop.wait(self.poll_s)
            now = time.monotonic()
            dt_s, last = now - last, now
            try:
                self._poll_once(dt_s)
            except Exception:  # one bad reading never ends the measurement
                continue

    def _poll_once(self, dt_s: float) -> None:
        for shard in self.shards:
            if not any(self.runtime.running(k) for k in shard.members):
                with self.lock:
                    self.no_member_s[shard.index] += dt_s
                    self.no_member_events.append((time.monotonic(), shard.index))
        states: list[str] = []
        nodes_text = None
        key_of: dict[str, str] = {}
        for key, pod in list(self.runtime.pods.items()):
            if not pod.alive():
                continue
            key_of[pod.ip] = key
            try:
                with self.runtime.client(pod.ip, timeout_s=0.5) as c:
                    info = str(c.execute_command("CLUSTER", "INFO"))
                    state = info.split("cluster_state:", 1)[1].split()[0]
                    if nodes_text is None and state == "ok":
                        nodes_text = str(c.execute_command("CLUSTER", "NODES"))
            except (redis.RedisError, OSError, IndexError):
                continue
            states.append(state)
        failing = sum(1 for s in states if s != "ok")
        with self.lock:
            if failing:
                self.fail_any_s += dt_s
            if states and 2 * failing > len(states):
                self.fail_majority_s += dt_s
        if nodes_text is not None:
            self._track_masters(nodes_text, key_of)

    def _track_masters(self, text: str, key_of: Mapping[str, str]) -> None:
        for line in text.splitlines():
            parts = line.split()
            if len(parts) < 9 or "master" not in parts[2] or "fail" in parts[2]:
                continue
            ip = parts[1].split("@", 1)[0].rsplit(":", 1)[0]
            for rng in parts[8:]:
                if rng.startswith("["):
                    continue
                lo = int(rng.split("-", 1)[0])
                for shard in self.shards:
                    if shard.lo == lo:
                        who = key_of.get(ip, ip)
                        with self.lock:
                            if self.masters.get(shard.index) not in (None, who):
                                self.failovers += 1
                            self.masters[shard.index] = who

    def begin(self) -> Window:
        with self.lock:
            window = Window(time.monotonic())
            window.fail_any_s = self.fail_any_s
            window.fail_majority_s = self.fail_majority_s
            window.failovers = self.failovers
            window.no_member_s = dict(self.no_member_s)
        return window

    def end(self, window: Window) -> Window:
        window.ended = time.monotonic()
        with self.lock:
            window.fail_any_s = self.fail_any_s - window.fail_any_s
            window.fail_majority_s = self.fail_majority_s - window.fail_majority_s
            window.failovers = self.failovers - window.failovers
            window.no_member_s = {
                i: self.no_member_s[i] - window.no_member_s.get(i, 0.0) for i in self.no_member_s
            }
        window.outage_s = {
            w.shard.index: w.longest_outage(window.began, window.ended) for w in self.writers
        }
        return window

    def acknowledged(self) -> int:
        return sum(len(w.acked) for w in self.writers)

    def lost(self) -> list[str]:
        return [k for w in self.writers for k in w.lost()]

    def writes_flow(self, timeout_s: float = 60.0) -> None:
        """Every shard takes writes again."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            now = time.monotonic()
            if all(now - w.last_ok < 1.0 and w.written > 0 for w in self.writers):
                return
            time.sleep(0.2)
        stale = {w.shard.index: round(time.monotonic() - w.last_ok, 1) for w in self.writers}
        raise AssertionError(f"shards not taking writes (seconds since the last): {stale}")


# -- kubectl drain, a node pool replaced, a rollout restart ---------------------------------


@dataclass
class DrainResult:
    node: str
    began: float
    ended: float = 0.0
    evicted: list[str] = field(default_factory=list)
    refusals: int = 0
    """HTTP 429 answers (a budget or the guard) before the evictions went through."""
    messages: list[str] = field(default_factory=list)
    completed: bool = False
    error: str = ""

    @property
    def seconds(self) -> float:
        return self.ended - self.began


class Drainer:
    """``kubectl drain`` for the pods of one namespace, counting every eviction per pod name."""

    def __init__(self, api: ApiClient, namespace: str, retry_s: float = KUBECTL_RETRY_S) -> None:
        self.core = CoreV1Api(api)
        self.namespace = namespace
        self.retry_s = retry_s
        self.evictions: Counter[str] = Counter()
        self.lock = threading.Lock()

    def cordon(self, node: str) -> None:
        json_of(
            self.core.patch_node(
                node,
                {"spec": {"unschedulable": True}},
                _content_type="application/merge-patch+json",
                _preload_content=False,
            )
        )

    def uncordon(self, node: str) -> None:
        json_of(
            self.core.patch_node(
                node,
                {"spec": {"unschedulable": None}},
                _content_type="application/merge-patch+json",
                _preload_content=False,
            )
        )

    def pods_on(self, node: str) -> list[dict[str, Any]]:
        listed = json_of(self.core.list_namespaced_pod(self.namespace, _preload_content=False))
        return [
            p
            for p in listed.get("items") or []
            if (p.get("spec") or {}).get("nodeName") == node
            and not p["metadata"].get("deletionTimestamp")
        ]

    def drain(self, node: str, timeout_s: float = 300.0) -> DrainResult:
        """Cordon, evict every pod at once (each retried on 429), wait until they are gone."""
        result = DrainResult(node, time.monotonic())
        self.cordon(node)
        pods = self.pods_on(node)
        threads = [
            threading.Thread(target=self._evict, args=(p, result, timeout_s), daemon=True)
            for p in pods
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        result.ended = time.monotonic()
        result.completed = not result.error and len(result.evicted) == len(pods)
        return result

    def _evict(self, pod: dict[str, Any], result: DrainResult, timeout_s: float) -> None:
        name, uid = pod["metadata"]["name"], pod["metadata"]["uid"]
        deadline = time.monotonic() + timeout_s
        body = {"metadata": {"name": name, "namespace": self.namespace}}
        while True:
            try:
                self.core.create_namespaced_pod_eviction(name, self.namespace, body)  # type: ignore[arg-type]
                break
            except ApiException as exc:
                if exc.status == 404:
                    return  # gone already
                if exc.status != 429 or time.monotonic() > deadline:
                    result.error = f"{name}: {exc.status} {exc.reason}"
                    return
                with self.lock:
                    result.refusals += 1
                    if len(result.messages) < 20:
                        result.messages.append(_message(exc))
                time.sleep(self.retry_s)
        with self.lock:
            result.evicted.append(name)
            self.evictions[name] += 1
        while time.monotonic() < deadline:  # kubectl waits for the pod to be deleted
            try:
                got = json_of(
                    self.core.read_namespaced_pod(name, self.namespace, _preload_content=False)
                )
            except ApiException as exc:
                if exc.status == 404:
                    return
                raise
            if got["metadata"]["uid"] != uid:
                return
            time.sleep(0.5)
        result.error = f"{name}: not deleted within {timeout_s:.0f}s"


def _message(exc: ApiException) -> str:
    import json

    try:
        return str(json.loads(exc.body or "{}").get("message", ""))[:300]
    except ValueError:
        return str(exc.body)[:300]


def _next(version: str) -> str:
    """v1.36.1 -> v1.36.2; anything else -> v1.36.2."""
    parts = version.lstrip("v").split(".")
    if len(parts) == 3 and all(p.isdigit() for p in parts):
        return f"v{parts[0]}.{parts[1]}.{int(parts[2]) + 1}"
    return "v1.36.2"


def replace_node(api: ApiClient, old: str, new: str) -> None:
    """A new node of the same zone and rack and the same labels, its kubelet a release newer
    (the pool's next version)."""
    node = json_of(CoreV1Api(api).read_node(old, _preload_content=False))
    labels = {
        k: v
        for k, v in (node["metadata"].get("labels") or {}).items()
        if not k.startswith("kubernetes.io/hostname")
    }
    old_version = ((node.get("status") or {}).get("nodeInfo") or {}).get("kubeletVersion", "")
    create_node(api, new, labels, cpu="4", memory="8Gi", kubelet_version=_next(old_version))


def delete_node(api: ApiClient, name: str) -> None:
    with contextlib.suppress(ApiException):
        CoreV1Api(api).delete_node(name)


def rollout_restart(api: ApiClient, namespace: str, names: Sequence[str]) -> None:
    """``kubectl rollout restart``: a new template annotation on each, all at once."""
    stamp = dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    apps = AppsV1Api(api)
    for name in names:
        body = {
            "spec": {
                "template": {
                    "metadata": {"annotations": {"kubectl.kubernetes.io/restartedAt": stamp}}
                }
            }
        }
        json_of(apps.patch_namespaced_stateful_set(name, namespace, body, _preload_content=False))


def rollout_done(api: ApiClient, namespace: str, names: Sequence[str]) -> str | None:
    """None once every StatefulSet runs its new revision on every pod, all Ready."""
    apps = AppsV1Api(api)
    for name in names:
        sts = json_of(apps.read_namespaced_stateful_set(name, namespace, _preload_content=False))
        spec, status = sts["spec"], sts.get("status") or {}
        want = spec["replicas"]
        if status.get("observedGeneration", 0) < sts["metadata"]["generation"]:
            return f"{name}: not observed yet"
        if status.get("updateRevision") != status.get("currentRevision"):
            return f"{name}: {status.get('updatedReplicas', 0)} of {want} updated"
        if status.get("readyReplicas", 0) < want:
            return f"{name}: {status.get('readyReplicas', 0)} of {want} Ready"
    return None


# -- the guarantee on the live cluster -----------------------------------------------------------


@dataclass(frozen=True)
class Survival:
    survived: bool
    """Every zone's loss leaves every shard and the master majority (the checker's verdict)."""
    takes: tuple[str, ...]
    masters_per_zone: Mapping[str, int]
    layout: tuple[str, ...] = ()
    """Each shard: its master's zone, then its replicas' zones."""
    mendable_by_failovers: bool | None = None
    """When it is not survived: whether a rebalance with moves off (failovers only, what the
    guard may do) finds a placement that survives."""

    def text(self) -> str:
        return "survived" if self.survived else "; ".join(self.takes)


def zone_survival(adapter: Any, policy: Policy, port: int = REDIS_PORT) -> Survival:
    """The checker's zone verdict on the cluster as the API server and Redis report it now."""
    from placer.maintenance.reading import read_guard_view
    from solver.check import keep_plan
    from solver.survival import survival_verdicts

    view = read_guard_view(adapter, policy, port=port)
    snapshot = view.snapshot
    verdicts = {v.level: v for v in survival_verdicts(snapshot, policy, keep_plan(snapshot))}
    zone = verdicts.get("zone")
    zone_of = {n.name: n.zone for n in snapshot.nodes}
    per_zone: Counter[str] = Counter()
    for m in snapshot.members:
        if m.role == Role.MASTER and m.pod.node_name:
            per_zone[str(zone_of.get(m.pod.node_name))] += 1
    if zone is None or not zone.judged:
        return Survival(False, ("no zone verdict",), dict(per_zone))
    takes = tuple(
        f"{t.domain}: "
        + ("master majority" if t.majority_lost else "")
        + (f" shards {', '.join(t.shards_lost)}" if t.shards_lost else "")
        for t in zone.takes
    ) + tuple(zone.lost_already)
    layout = tuple(
        f"{key}: "
        + "/".join(
            str(zone_of.get(m.pod.node_name or ""))
            for m in sorted(ms, key=lambda m: m.role != Role.MASTER)
        )
        for key, ms in sorted(snapshot.shards.items())
    )
    mendable = None if zone.survived else _failovers_mend(snapshot, policy)
    return Survival(zone.survived, takes, dict(sorted(per_zone.items())), layout, mendable)


def _failovers_mend(snapshot: Any, policy: Policy) -> bool | None:
    """Whether the rebalance the guard's restore runs (moves off) ends in a zone-survivable plan."""
    from solver.repair import Caps
    from solver.solve import SolveOptions, solve
    from solver.survival import survival_verdicts

    try:
        plan = solve(
            snapshot,
            policy,
            "rebalance",
            SolveOptions(
                deadline=time.monotonic() + 10.0,
                caps=Caps(max_moves=0, max_failovers=None),
                explain=False,
                search=False,
            ),
        )
    except Exception:
        return None
    return all(v.survived for v in survival_verdicts(snapshot, policy, plan) if v.level == "zone")


# -- the guard's webhook, reachable in this harness --------------------------------------------


def webhook_material(service: str, namespace: str) -> dict[str, bytes]:
    """A CA and a serving certificate for the Service's names and 127.0.0.1, valid a year, as
    the guard's Secret holds them (``ca.crt``, ``tls.crt``, ``tls.key``)."""
    from placer.maintenance.certs import service_names

    now = dt.datetime.now(dt.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "e2e guard CA")])
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=365))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .sign(ca_key, hashes.SHA256())
    )
    names = service_names(service, namespace)
    key = ec.generate_private_key(ec.SECP256R1())
    sans: list[x509.GeneralName] = [x509.DNSName(n) for n in names]
    sans.append(x509.IPAddress(ipaddress.ip_address("127.0.0.1")))
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, names[0])]))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=300))
        .add_extension(x509.SubjectAlternativeName(sans), critical=False)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    pem = serialization.Encoding.PEM
    return {
        "ca.crt": ca.public_bytes(pem),
        "tls.crt": cert.public_bytes(pem),
        "tls.key": key.private_bytes(
            pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        ),
    }


def create_tls_secret(api: ApiClient, namespace: str, name: str, data: Mapping[str, bytes]) -> None:
    body = {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "kubernetes.io/tls",
        "metadata": {"name": name, "namespace": namespace},
        "data": {k: base64.b64encode(v).decode() for k, v in data.items()},
    }
    json_of(CoreV1Api(api).create_namespaced_secret(namespace, body, _preload_content=False))  # type: ignore[arg-type]


def route_webhook(objects: list[dict[str, Any]], port: int, ca_pem: bytes) -> None:
    """The guard's webhooks call ``https://127.0.0.1:PORT/validate`` (in place of the Service)."""
    bundle = base64.b64encode(ca_pem).decode()
    for obj in objects:
        if obj["kind"] != "ValidatingWebhookConfiguration":
            continue
        for hook in obj["webhooks"]:
            hook["clientConfig"] = {"url": f"https://127.0.0.1:{port}/validate", "caBundle": bundle}


def force_delete_all(api: ApiClient, namespace: str, statefulsets: Sequence[str]) -> None:
    """The StatefulSets and their pods gone at once (no kubelet finishes them afterwards)."""
    apps, core = AppsV1Api(api), CoreV1Api(api)
    for name in statefulsets:
        with contextlib.suppress(ApiException):
            apps.delete_namespaced_stateful_set(name, namespace)
    listed = json_of(core.list_namespaced_pod(namespace, _preload_content=False))
    for pod in listed.get("items") or []:
        with contextlib.suppress(ApiException):
            core.delete_namespaced_pod(pod["metadata"]["name"], namespace, grace_period_seconds=0)


@contextlib.contextmanager
def background(target: Callable[[], Any]) -> Iterator[list[Any]]:
    """``target`` in a thread; the list holds its result (or the exception) once joined."""
    out: list[Any] = []

    def run() -> None:
        try:
            out.append(target())
        except Exception as exc:
            out.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    try:
        yield out
    finally:
        thread.join()
