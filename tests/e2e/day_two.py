"""The pieces of a day-two scenario on the real control plane: a deployment running real Redis
behind its pods, a zone lost and returned, a node drained, and what each leaves.

A zone is lost as a cloud loses one: every redis-server of its nodes is killed (SIGKILL), the
nodes turn NotReady with the unreachable taints and their pods NotReady, as the node lifecycle
controller would mark them. It returns as the same machines come back: the nodes Ready, the same
pods' servers started again on their IPs with their data (nodes.conf), rejoining as replicas.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from kubernetes.client import ApiClient, CoreV1Api
from kubernetes.client.exceptions import ApiException

from tests.e2e.acked_writes import AckedWriter
from tests.e2e.control_plane import json_of
from tests.e2e.formation import Topology, healthy, topology, wait_until, zone_losses
from tests.e2e.kubelet import KubeletStandIn
from tests.e2e.redis_pods import RedisPods

UNREACHABLE = "node.kubernetes.io/unreachable"
RECOVER_WITHIN_S = 60.0
JOIN_WITHIN_S = 90.0


@dataclass
class Scene:
    """One deployment's pods, their servers and what the test knows of them."""

    api: ApiClient
    namespace: str
    zone_of_node: dict[str, str]
    runtime: RedisPods
    kubelet: KubeletStandIn
    shards: int
    writer: AckedWriter | None = None
    log: list[dict[str, Any]] = field(default_factory=list)

    @property
    def core(self) -> CoreV1Api:
        return CoreV1Api(self.api)

    def pods(self) -> list[dict[str, Any]]:
        found = json_of(self.core.list_namespaced_pod(self.namespace, _preload_content=False))
        items: list[dict[str, Any]] = found.get("items") or []
        return items

    def zone_of_ip(self) -> dict[str, str]:
        """Each running server's IP -> the zone of its pod's node."""
        out = {}
        for pod in self.pods():
            key = f"{self.namespace}/{pod['metadata']['name']}"
            node = (pod.get("spec") or {}).get("nodeName")
            if node and key in self.runtime.pods:
                out[self.runtime.ip(key)] = self.zone_of_node[node]
        return out

    def ips(self, zone: str | None = None, alive: bool = True) -> list[str]:
        zones = self.zone_of_ip()
        return sorted(
            ip
            for ip, z in zones.items()
            if (zone is None or z == zone) and (not alive or self._alive(ip))
        )

    def _alive(self, ip: str) -> bool:
        return any(p.ip == ip and p.alive() for p in self.runtime.pods.values())

    def topology(self) -> Topology:
        return topology(self.runtime, self.ips())

    def losses(self) -> dict[str, list[str]]:
        """For each zone, what its loss would take now (empty: survived)."""
        return zone_losses(self.topology(), self.zone_of_ip())

    def masters_per_zone(self) -> dict[str, int]:
        zones = self.zone_of_ip()
        counts = {z: 0 for z in sorted(set(self.zone_of_node.values()))}
        for master in self.topology().masters:
            counts[zones[master]] += 1
        return counts

    def note(self, event: str, **facts: Any) -> None:
        entry = {"event": event, "at": round(time.monotonic(), 2), **facts}
        self.log.append(entry)
        print(f"  {event}: {facts}")

    # -- failures --------------------------------------------------------------------------------

    def _set_node(self, name: str, ready: bool) -> None:
        now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        condition = {
            "type": "Ready",
            "status": "True" if ready else "Unknown",
            "reason": "KubeletReady" if ready else "NodeStatusUnknown",
            "message": "e2e: " + ("back" if ready else "zone lost"),
            "lastHeartbeatTime": now,
            "lastTransitionTime": now,
        }
        json_of(
            self.core.patch_node_status(
                name,
                {"status": {"conditions": [condition]}},
                _content_type="application/strategic-merge-patch+json",
                _preload_content=False,
            )
        )
        node = json_of(self.core.read_node(name, _preload_content=False))
        taints = [
            t for t in (node.get("spec") or {}).get("taints") or [] if t["key"] != UNREACHABLE
        ]
        if not ready:
            taints += [
                {"key": UNREACHABLE, "effect": "NoSchedule"},
                {"key": UNREACHABLE, "effect": "NoExecute"},
            ]
        json_of(
            self.core.patch_node(
                name,
                {"spec": {"taints": taints or None}},
                _content_type="application/merge-patch+json",
                _preload_content=False,
            )
        )

    def _pods_on(self, nodes: Sequence[str]) -> list[dict[str, Any]]:
        return [p for p in self.pods() if (p.get("spec") or {}).get("nodeName") in nodes]

    def lose_zone(self, zone: str) -> list[str]:
        """Every server of the zone killed, its nodes NotReady and its pods NotReady."""
        nodes = [n for n, z in self.zone_of_node.items() if z == zone]
        self.kubelet.down_nodes |= set(nodes)
        pods = self._pods_on(nodes)
        self.runtime.crash([f"{self.namespace}/{p['metadata']['name']}" for p in pods])
        for node in nodes:
            self._set_node(node, ready=False)
        for pod in pods:
            with contextlib.suppress(ApiException):
                self.core.patch_namespaced_pod_status(
                    pod["metadata"]["name"],
                    self.namespace,
                    {"status": {"conditions": [{"type": "Ready", "status": "False"}]}},
                )
        return nodes

    def restore_zone(self, zone: str) -> None:
        nodes = [n for n, z in self.zone_of_node.items() if z == zone]
        for node in nodes:
            self._set_node(node, ready=True)
        self.kubelet.down_nodes -= set(nodes)

    def wait_serving(self) -> float:
        """Seconds until the live servers say cluster_state:ok with a live master per shard."""
        began = time.monotonic()

        def serving() -> str | None:
            alive = self.ips()
            for ip in alive:
                top = topology(self.runtime, [ip])
                if top.state != "ok":
                    return f"{ip}: cluster_state {top.state}"
                live = [m for m in top.masters if m in alive]
                if len(live) != self.shards:
                    return f"{ip}: {len(live)} live masters of {self.shards}"
            return None

        wait_until(serving, RECOVER_WITHIN_S, "the cluster to serve every slot again")
        return time.monotonic() - began

    def wait_whole(self) -> float:
        """Seconds until every server is back, joined, and all agree (no one flagged)."""
        began = time.monotonic()

        def whole() -> str | None:
            pods = [p for p in self.pods() if not p["metadata"].get("deletionTimestamp")]
            ips = self.ips()
            if len(ips) != len(pods):
                return f"{len(ips)} of {len(pods)} servers up"
            return healthy(self.runtime, ips, self.shards)

        wait_until(whole, JOIN_WITHIN_S, "every server back and joined")
        return time.monotonic() - began

    def writes_flow(self, acknowledged: int = 0, timeout_s: float = 30.0) -> None:
        """Writes are taken again (the client sees the masters), and at least ``acknowledged``
        more are acknowledged by a replica."""
        writer = self.writer
        assert writer is not None
        taken, acked = writer.written, len(writer.acked)

        def flowing() -> str | None:
            if writer.written > taken + 10 and len(writer.acked) >= acked + acknowledged:
                return None
            return writer.status()

        wait_until(flowing, timeout_s, "writes to be taken")

    # -- a node drain, as kubectl drain does it ------------------------------------------------

    def drain(self, node: str, timeout_s: float = 120.0) -> list[str]:
        """Cordon ``node``, then evict its pods through the Eviction API, retrying while a
        PodDisruptionBudget refuses (HTTP 429); the names of the pods evicted."""
        json_of(
            self.core.patch_node(
                node,
                {"spec": {"unschedulable": True}},
                _content_type="application/merge-patch+json",
                _preload_content=False,
            )
        )
        evicted = []
        for pod in self._pods_on([node]):
            name = pod["metadata"]["name"]
            deadline = time.monotonic() + timeout_s
            while True:
                try:
                    self.core.create_namespaced_pod_eviction(
                        name,
                        self.namespace,
                        {"metadata": {"name": name, "namespace": self.namespace}},  # type: ignore[arg-type]
                    )
                    evicted.append(name)
                    break
                except ApiException as exc:
                    if exc.status != 429 or time.monotonic() > deadline:
                        raise
                    time.sleep(1.0)
        return evicted

    def uncordon(self, node: str) -> None:
        json_of(
            self.core.patch_node(
                node,
                {"spec": {"unschedulable": None}},
                _content_type="application/merge-patch+json",
                _preload_content=False,
            )
        )


def master_node(scene: Scene) -> str:
    """A node that hosts a master now."""
    masters = set(scene.topology().masters)
    for pod in scene.pods():
        key = f"{scene.namespace}/{pod['metadata']['name']}"
        if key in scene.runtime.pods and scene.runtime.ip(key) in masters:
            node: str = pod["spec"]["nodeName"]
            return node
    raise AssertionError("no master found")


def ordinal_ips(scene: Scene, statefulset: str, count: int) -> list[str]:
    """The pod IPs of ``statefulset``'s pods 0..count-1, in ordinal order."""
    return [scene.runtime.ip(f"{scene.namespace}/{statefulset}-{i}") for i in range(count)]


def wait_servers(scene: Scene, names: Sequence[str], timeout_s: float = 120.0) -> None:
    keys = [f"{scene.namespace}/{n}" for n in names]

    def up() -> str | None:
        missing = [k for k in keys if not scene.runtime.alive(k)]
        return f"no server yet for {missing[:3]}" if missing else None

    wait_until(up, timeout_s, f"servers behind {len(keys)} pods")


@contextlib.contextmanager
def writing(scene: Scene, seeds: Sequence[str]) -> Iterator[AckedWriter]:
    with AckedWriter(scene.runtime, seeds) as writer:
        scene.writer = writer
        yield writer
