"""An informer-style cache of nodes, pods and StatefulSets: list once, then follow the watch.

The binder decides from this cache rather than listing 15,000 pods per batch. It holds no
state the cluster does not: ``resync`` rebuilds it from scratch (at start, after a lost
watch, after regaining leadership). What the binder itself just wrote (a binding, a pin) is
recorded at once so the next decision counts it before the watch echoes it back; what it is
about to write (a pod decided and handed to enforcement) is assumed there even earlier, so the
next batch is solved around it while its Binding is still in flight.
"""

import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from placer.kube.adapter import KubeAdapter, WatchEvent, WatchExpired
from solver.collector import settle_survivors

log = logging.getLogger(__name__)

PodKey = tuple[str, str]


class _Relisted(Exception):
    """The watch started before the last list: its events are either in the list or will come
    again on a watch from the list's version, so it is left for a new one."""


def pod_key_of(pod: Mapping[str, Any]) -> PodKey:
    meta = pod.get("metadata") or {}
    return (str(meta.get("namespace") or "default"), str(meta.get("name", "")))


def _version(obj: Mapping[str, Any]) -> int:
    raw = (obj.get("metadata") or {}).get("resourceVersion") or "0"
    return int(raw) if str(raw).isdigit() else 0


class PodFeed:
    """One reader's view of which pods changed: every key written or removed since it last
    asked, or ``relisted`` when a list replaced everything (then it reads them all)."""

    def __init__(self) -> None:
        self.changed: set[PodKey] = set()
        self.relisted = True


class _TrackedPods(dict[PodKey, dict[str, Any]]):
    """The cache's pods, telling every feed which keys are written or removed: a reader that
    keeps its own view (the incremental snapshot) asks what changed rather than reading all."""

    def __init__(self, feeds: list[PodFeed], *args: Any) -> None:
        super().__init__(*args)
        self.feeds = feeds

    def _note(self, key: PodKey) -> None:
        for feed in self.feeds:
            feed.changed.add(key)

    def __setitem__(self, key: PodKey, value: dict[str, Any]) -> None:
        self._note(key)
        super().__setitem__(key, value)

    def __delitem__(self, key: PodKey) -> None:
        self._note(key)
        super().__delitem__(key)

    def pop(self, key: PodKey, *default: Any) -> Any:
        if key in self:
            self._note(key)
        return super().pop(key, *default)


@dataclass(frozen=True)
class ReadableObjects:
    """What ``ClusterCache.readable_objects`` hands out (the dicts are shared: never mutate)."""

    nodes: list[dict[str, Any]]
    pods: list[dict[str, Any]]
    statefulsets: list[dict[str, Any]]
    statefulsets_at: float
    """When those StatefulSets were listed (the cache's ``clock``)."""


class ClusterCache:
    """Thread-safe: the watch thread applies events while the decision loop reads copies."""

    def __init__(
        self,
        adapter: KubeAdapter,
        namespace: str | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.adapter = adapter
        self.namespace = namespace
        self.clock = clock
        self._lock = threading.RLock()
        self.nodes: dict[str, dict[str, Any]] = {}
        self._feeds: list[PodFeed] = []
        self.pods: dict[PodKey, dict[str, Any]] = _TrackedPods(self._feeds)
        self.statefulsets: list[dict[str, Any]] = []
        self.statefulsets_at = float("-inf")
        """When StatefulSets were last listed (``clock``): no watch follows them."""
        self.version: str | None = None
        self.node_version: str | None = None
        self.synced = False
        self.generation = 0
        """Bumped on every change, so a reader can tell nothing moved since it last looked."""
        self._assumed: dict[PodKey, tuple[str, str, Mapping[str, str]]] = {}
        """Pods we decided or bound, by (uid, node, annotations), until the watch shows the binding:
        kube-scheduler's "assumed pods". An older event arriving late must not make a bound pod
        look pending, and a pod whose Binding is in flight must not be planned again."""
        self._truth: dict[PodKey, dict[str, Any]] = {}
        """The server's own version of each assumed pod, to fall back on if the write fails."""
        self._pod_list = 0
        self._node_list = 0
        """Counts of lists: a watch begun before the latest one must not apply its events (an
        event applied between a list's read and its replacing the cache would be lost)."""
        self.lost: str | None = None
        """Why the cache may no longer hold what the server holds (a watch broken, a list
        failed, a write whose outcome is unknown), until a list made after that replaces it."""
        self._losses = 0
        self.recoveries = 0
        """How many times a list replaced the cache after it was lost."""
        self.on_readable: Callable[[bool], None] | None = None
        """Told when the cluster becomes readable (a list replaced the cache) and when it stops
        being so (``lose``): the binder's readiness."""

    def lose(self, reason: str) -> None:
        """The cache may be stale: a watch broke, a list failed, or a write's outcome is unknown
        (the server did not answer, or failed inside). Nothing is decided from it again until a
        list begun after this has replaced it, so no plan rests on a pod the server may have
        bound meanwhile."""
        with self._lock:
            self._losses += 1
            first = self.lost is None
            self.lost = reason
            self.synced = False
        if first:
            log.warning("cluster unreadable: %s; listing again before the next decision", reason)
            if self.on_readable is not None:
                self.on_readable(False)

    def resync(self) -> None:
        """List everything again; the watch resumes from the list's resourceVersion.

        A failed list loses the cache (``lose``) and raises; a list begun before a loss
        replaces the cache but leaves it lost (the next one settles it)."""
        with self._lock:
            losses = self._losses
        try:
            nodes, node_version = self.adapter.list_nodes_with_version()
            pods, version = self.adapter.list_pods_with_version(namespace=self.namespace)
            sets_at = self.clock()
            statefulsets = self.adapter.list_statefulsets(namespace=self.namespace)
        except Exception as exc:
            self.lose(f"list failed: {exc}")
            raise
        with self._lock:
            self.nodes = {n["metadata"]["name"]: n for n in nodes}
            listed = {pod_key_of(p): p for p in pods}
            # Assumptions outlive a relist: the writes behind them may still be in flight.
            self._truth = {k: listed[k] for k in self._assumed if k in listed}
            self._assumed = {k: a for k, a in self._assumed.items() if k in self._truth}
            self.pods = _TrackedPods(
                self._feeds, {k: self._with_assumption(k, p) for k, p in listed.items()}
            )
            for feed in self._feeds:
                feed.relisted, feed.changed = True, set()
            self.statefulsets = statefulsets
            self.statefulsets_at = sets_at
            self.version = version
            self.node_version = node_version
            current = losses == self._losses
            was_lost, first = self.lost, not self.synced and self._pod_list == 0
            if current:
                self.synced = True
                self.lost = None
                self.recoveries += was_lost is not None
            self.generation += 1
            self._pod_list += 1
            self._node_list += 1
        if current and was_lost is not None:
            log.info("cluster readable again (it was not: %s)", was_lost)
        if current and (first or was_lost is not None) and self.on_readable is not None:
            self.on_readable(True)
        # The listed objects live until the next resync: move them out of the collector's
        # sight, or every full collection walks 15,000 pods to free nothing.
        settle_survivors()
        log.info(
            "cache resynced: nodes=%d pods=%d statefulsets=%d version=%s",
            len(nodes),
            len(pods),
            len(statefulsets),
            version,
        )

    def refresh_nodes(self) -> None:
        """A fresh node list: a node can vanish between a solve and its bindings."""
        listed, version = self.adapter.list_nodes_with_version()
        nodes = {n["metadata"]["name"]: n for n in listed}
        with self._lock:
            if _versions(nodes) != _versions(self.nodes):
                self.generation += 1
            self.nodes = nodes
            self.node_version = version
            self._node_list += 1

    def poll_nodes(self, timeout_seconds: int = 60) -> int:
        """Apply node changes since the last version, like ``poll`` for pods.

        Following the node watch keeps 5,000 nodes current for the price of their changes;
        listing them before every batch would cost the API server a full list each time.
        """
        if not self.synced:
            self.resync()
        with self._lock:
            since, listed = self.node_version, self._node_list
        events = self.adapter.watch_nodes(resource_version=since, timeout_seconds=timeout_seconds)
        return self._follow(
            events, lambda e: self.apply_node(e, listed), self.refresh_nodes, "node watch"
        )

    on_expired: Callable[[str], None] | None = None
    """Told of each watch that ended 410 Gone (``pod watch`` or ``node watch``) and was
    listed again."""

    def apply_node(self, event: WatchEvent, listed: int | None = None) -> bool:
        node = event.object
        before = self.generation
        with self._lock:
            if listed is not None and listed != self._node_list:
                raise _Relisted
            if event.type != "BOOKMARK" and node.get("kind", "Node") == "Node":
                name = str((node.get("metadata") or {}).get("name", ""))
                current = self.nodes.get(name)
                if event.type == "DELETED":
                    if self.nodes.pop(name, None) is not None:
                        self.generation += 1
                elif current is None or _version(node) >= _version(current):
                    self.nodes[name] = node
                    if current is None or _placement_view(node) != _placement_view(current):
                        self.generation += 1  # heartbeats alone change nothing we decide on
            self.node_version = event.resource_version or self.node_version
            return self.generation != before

    def refresh_statefulsets(self) -> None:
        listed_at = self.clock()
        statefulsets = self.adapter.list_statefulsets(namespace=self.namespace)
        with self._lock:
            if [_version(s) for s in statefulsets] != [_version(s) for s in self.statefulsets]:
                self.generation += 1
            self.statefulsets = statefulsets
            self.statefulsets_at = listed_at

    def poll(self, timeout_seconds: int = 60, on_event: Callable[[], None] | None = None) -> int:
        """Apply the pod changes since the last version; returns how many arrived.

        Blocks for up to ``timeout_seconds`` against a real API server; a 410 (version too
        old) triggers a resync, as client-go's reflector does.
        """
        if not self.synced:
            self.resync()
        with self._lock:
            since, listed = self.version, self._pod_list
        events = self.adapter.watch_pods(
            namespace=self.namespace, resource_version=since, timeout_seconds=timeout_seconds
        )
        return self._follow(
            events, lambda e: self.apply(e, listed), self.resync, "pod watch", on_event
        )

    def _follow(
        self,
        events: Iterable[WatchEvent],
        apply: Callable[[WatchEvent], bool],
        relist: Callable[[], None],
        what: str,
        on_event: Callable[[], None] | None = None,
    ) -> int:
        """Apply a watch's events as they arrive; on a 410, list again, as client-go does."""
        count = 0
        try:
            for event in events:
                changed = apply(event)
                count += 1
                if changed and on_event is not None:
                    on_event()  # wake the decision loop now, not when the watch ends
            return count
        except _Relisted:
            return count  # the caller polls again, from the list's version
        except WatchExpired as exc:
            log.info("%s expired (%s): listing again", what, exc.message or exc.status)
            if self.on_expired is not None:
                self.on_expired(what)
            relist()
            return 1

    def apply(self, event: WatchEvent, listed: int | None = None) -> bool:
        """Apply one pod event; True if it changed what a decision sees.

        ``listed`` is the count of lists when the event's watch began; a watch older than the
        latest list stops (it is polled again from the list's version).

        The echo of our own binding (the node we assumed, now the server's, with the
        annotations our write added) changes nothing a decision reads: it is stored without
        counting as a change, so it neither wakes the loop nor makes it rebuild its snapshot.
        A binding by someone else to the same node is a change.
        """
        obj = event.object
        with self._lock:
            if listed is not None and listed != self._pod_list:
                raise _Relisted
            if event.type == "BOOKMARK":
                self.version = event.resource_version or self.version
                return False
            if obj.get("kind", "Pod") != "Pod":
                return False
            before = self.generation
            key = pod_key_of(obj)
            current = self.pods.get(key)
            assumed = self._assumed.get(key)
            if (
                event.type != "DELETED"
                and assumed is not None
                and (obj.get("spec") or {}).get("nodeName") == assumed[1]
                and str((obj.get("metadata") or {}).get("uid") or "") == assumed[0]
                and _carries(obj, assumed[2])
            ):
                self._assumed.pop(key, None)
                self._truth.pop(key, None)
                self.pods[key] = obj
                self.version = event.resource_version or self.version
                return False
            if event.type == "DELETED":
                if current is None or _same_pod(current, obj):
                    self.pods.pop(key, None)
                    self._assumed.pop(key, None)
                    self._truth.pop(key, None)
                    self.generation += 1
            elif (
                current is None or _version(obj) >= _version(current) or not _same_pod(current, obj)
            ):
                self.pods[key] = self._with_assumption(key, obj)
                self.generation += 1
            self.version = event.resource_version or self.version
            return self.generation != before

    def _with_assumption(self, key: PodKey, pod: dict[str, Any]) -> dict[str, Any]:
        """``pod`` as the server sent it, counted on its assumed node if it has one."""
        assumed = self._assumed.get(key)
        if assumed is None:
            return pod
        uid = str((pod.get("metadata") or {}).get("uid") or "")
        if uid != assumed[0] or (pod.get("spec") or {}).get("nodeName"):
            # a new pod of the same name, or the server's view has caught up
            self._assumed.pop(key, None)
            self._truth.pop(key, None)
            return pod
        self._truth[key] = pod
        view = {**pod, "spec": {**(pod.get("spec") or {}), "nodeName": assumed[1]}}
        if assumed[2]:  # what our write adds (the role): the pod as it will be
            meta = pod.get("metadata") or {}
            annotations = {**(meta.get("annotations") or {}), **assumed[2]}
            view["metadata"] = {**meta, "annotations": annotations}
        return view

    def put_pod(self, pod: dict[str, Any]) -> None:
        """Record a pod as the server returned it (after a pin, or a re-read)."""
        with self._lock:
            key = pod_key_of(pod)
            current = self.pods.get(key)
            if current is None or _version(pod) >= _version(current) or not _same_pod(current, pod):
                self.pods[key] = self._with_assumption(key, pod)
                self.generation += 1

    def forget_pod(self, key: PodKey) -> None:
        with self._lock:
            self.pods.pop(key, None)
            self._assumed.pop(key, None)
            self._truth.pop(key, None)
            self.generation += 1

    def assume(
        self, key: PodKey, uid: str, node: str, annotations: Mapping[str, str] | None = None
    ) -> bool:
        """Count a pending pod on ``node`` from now on, before the write that puts it there
        (with the ``annotations`` that write adds: the role its plan gave it).

        False (and nothing assumed) when the pod is gone, is another pod of the same name, or
        already has a node: the plan for it is stale.
        """
        with self._lock:
            pod = self._truth.get(key) or self.pods.get(key)
            if pod is None or (pod.get("spec") or {}).get("nodeName"):
                return False
            if uid and str((pod.get("metadata") or {}).get("uid") or "") != uid:
                return False
            self._assumed[key] = (
                str((pod.get("metadata") or {}).get("uid") or ""),
                node,
                dict(annotations or {}),
            )
            self.pods[key] = self._with_assumption(key, pod)
            self.generation += 1
            return True

    def forget_assumed(self, key: PodKey) -> None:
        """The write behind an assumption failed or was never sent: the server's view again."""
        with self._lock:
            if self._assumed.pop(key, None) is None:
                return
            truth = self._truth.pop(key, None)
            if truth is not None:
                self.pods[key] = truth
            self.generation += 1

    def note_bound(self, key: PodKey, node: str) -> None:
        """The server accepted our binding; count the pod on its node until the watch says so."""
        with self._lock:
            pod = self.pods.get(key)
            if key in self._assumed and self._assumed[key][1] == node:
                return  # assumed when decided: nothing changes
            pod = self._truth.get(key) or pod
            if pod is not None and not (pod.get("spec") or {}).get("nodeName"):
                uid = str((pod.get("metadata") or {}).get("uid") or "")
                self._assumed[key] = (uid, node, {})
                self.pods[key] = self._with_assumption(key, pod)
                self.generation += 1

    def settle(self, pod: dict[str, Any]) -> None:
        """Our write landed without giving the pod a node (a pin): the server's pod, as it
        returned it, replaces the assumption in one step, so no reader sees the pod pending."""
        with self._lock:
            key = pod_key_of(pod)
            self._assumed.pop(key, None)
            truth = self._truth.pop(key, None)
            current = truth or self.pods.get(key)
            if current is None or _version(pod) >= _version(current) or not _same_pod(current, pod):
                self.pods[key] = pod
            elif truth is not None:
                self.pods[key] = truth
            self.generation += 1

    def server_pod(self, key: PodKey) -> dict[str, Any] | None:
        """The pod as the server last sent it, without any assumption of ours."""
        with self._lock:
            return self._truth.get(key) or self.pods.get(key)

    def assumed(self) -> dict[PodKey, str]:
        """Pods counted on a node the server has not recorded yet: pod -> node."""
        with self._lock:
            return {k: node for k, (_, node, _) in self._assumed.items()}

    def pod_feed(self) -> PodFeed:
        """A new reader's feed of pod changes (its first answer: read everything)."""
        with self._lock:
            feed = PodFeed()
            self._feeds.append(feed)
            return feed

    def pod_changes(
        self, feed: PodFeed, also: Iterable[PodKey] = ()
    ) -> dict[PodKey, dict[str, Any] | None] | None:
        """The pods written or removed since ``feed`` last asked, and those of ``also``, as they
        are now (None: gone); None when a list replaced everything since (read them all)."""
        with self._lock:
            if feed.relisted:
                feed.relisted, feed.changed = False, set()
                return None
            keys, feed.changed = feed.changed, set()
            keys.update(also)
            return {key: self.pods.get(key) for key in keys}

    def objects_statefulsets(self) -> list[dict[str, Any]]:
        with self._lock:
            return list(self.statefulsets)

    def readable_objects(self) -> ReadableObjects | None:
        """Nodes, pods as the server last sent them (without our assumptions) and StatefulSets,
        taken at one instant; None while the cache may not hold what the server holds (never
        listed yet, or ``lost`` and not listed again): the cluster is unreadable then, and
        nothing may be decided from what the cache still holds."""
        with self._lock:
            if not self.synced or self.lost is not None:
                return None
            return ReadableObjects(
                list(self.nodes.values()),
                [self._truth.get(k) or p for k, p in self.pods.items()],
                list(self.statefulsets),
                self.statefulsets_at,
            )

    def objects(self) -> tuple[list[dict[str, Any]], list[dict[str, Any]], list[dict[str, Any]]]:
        """(nodes, pods, statefulsets) as of now; the dicts are shared, never mutate them."""
        with self._lock:
            return list(self.nodes.values()), list(self.pods.values()), list(self.statefulsets)


def _placement_view(node: Mapping[str, Any]) -> tuple[Any, ...]:
    """The parts of a node a placement depends on: what a heartbeat never changes."""
    meta, spec, status = (node.get(k) or {} for k in ("metadata", "spec", "status"))
    ready = [c.get("status") for c in status.get("conditions") or [] if c.get("type") == "Ready"]
    return (
        meta.get("labels"),
        meta.get("deletionTimestamp"),
        spec.get("taints"),
        spec.get("unschedulable"),
        status.get("allocatable"),
        status.get("capacity"),
        ready,
    )


def _versions(nodes: Mapping[str, Mapping[str, Any]]) -> dict[str, int]:
    return {name: _version(node) for name, node in nodes.items()}


def _same_pod(a: Mapping[str, Any], b: Mapping[str, Any]) -> bool:
    uid_a = (a.get("metadata") or {}).get("uid")
    uid_b = (b.get("metadata") or {}).get("uid")
    return not uid_a or not uid_b or uid_a == uid_b


def _carries(pod: Mapping[str, Any], annotations: Mapping[str, str]) -> bool:
    """Whether the server's pod has every annotation our write added (the view had them)."""
    held = (pod.get("metadata") or {}).get("annotations") or {}
    return all(held.get(k) == v for k, v in annotations.items())
