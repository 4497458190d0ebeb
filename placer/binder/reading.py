"""Reading: the snapshot one binder decision works on, built from the watch cache.

The binder's other parts never look at raw objects to learn what the cluster holds; they get
it from here: which pending pods are ours (by the enforcement mode's marker), which pods count
on a node though unbound (gate mode's pins), and the snapshot the solver reads. Rebuilding the
snapshot of a large cluster is the binder's costliest step besides the solve, so it is kept
until the cache changes, and objects are parsed once (``ParseCache``).
"""

import logging
import time
from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any, Protocol

from models.cluster import Pod
from models.errors import InputError
from models.kube_objects import ParseCache
from models.policy import Policy
from models.snapshot import Snapshot
from models.snapshot_builder import SnapshotBuilder
from placer.binder.cache import ClusterCache, PodKey, pod_key_of
from placer.binder.config import BinderConfig
from placer.binder.refusals import Refusals
from placer.binder.tally import PodTally
from placer.binder.volumes import volume_epoch, volume_inputs
from placer.kube.adapter import KubeAdapter
from placer.kube.objects import NODE_NAME_FIELD, gate_names
from solver.collector import Settling, collector_paused

log = logging.getLogger("placer.binder.loop")
"""Every part of the binder logs as the binder: operators filter on one logger name."""

Read = tuple[Snapshot, dict[PodKey, str], dict[PodKey, dict[str, Any]]]
"""The snapshot, our pending pods' names by key, and those pods as the cache holds them."""


class NoteDecision(Protocol):
    def __call__(
        self,
        pods: list[PodKey],
        raw: Mapping[PodKey, dict[str, Any]],
        decision: str,
        reason: str,
        event_reason: str | None = None,
    ) -> None: ...


def labels(pod: Mapping[str, Any]) -> Mapping[str, str]:
    return (pod.get("metadata") or {}).get("labels") or {}


def annotations(pod: Mapping[str, Any]) -> Mapping[str, str]:
    return (pod.get("metadata") or {}).get("annotations") or {}


def spec(pod: Mapping[str, Any]) -> Mapping[str, Any]:
    return pod.get("spec") or {}


def uid(pod: Mapping[str, Any]) -> str:
    return str((pod.get("metadata") or {}).get("uid") or "")


def _deleting(pod: Mapping[str, Any]) -> bool:
    return bool((pod.get("metadata") or {}).get("deletionTimestamp"))


def _terminal(pod: Mapping[str, Any]) -> bool:
    return (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed")


def by_key_name(key: PodKey) -> str:
    return f"{key[0]}/{key[1]}"


def pinned_node(pod: Mapping[str, Any]) -> str | None:
    """The node a pending pod is pinned to by a required ``metadata.name`` field affinity.

    In gate mode a pinned, ungated pod waits for kube-scheduler to bind it; until then it
    must still count on its node, or the next batch would hand its room to someone else.
    """
    required = ((spec(pod).get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    ) or {}
    nodes: set[str] = set()
    terms = required.get("nodeSelectorTerms") or []
    for term in terms:
        names = [
            tuple(f.get("values") or ())
            for f in term.get("matchFields") or []
            if f.get("key") == NODE_NAME_FIELD and f.get("operator") == "In"
        ]
        if len(names) != 1 or len(names[0]) != 1:
            return None
        nodes.add(str(names[0][0]))
    return nodes.pop() if len(nodes) == 1 else None


def _created(pod: Mapping[str, Any]) -> float | None:
    raw = (pod.get("metadata") or {}).get("creationTimestamp")
    if not raw:
        return None
    try:
        return datetime.fromisoformat(str(raw).replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def _unknown_owners(pods: list[Pod], statefulsets: list[dict[str, Any]]) -> set[tuple[str, str]]:
    """The StatefulSets our pods belong to (as the snapshot reads the owner) that we lack."""
    known = {
        (str(s["metadata"].get("namespace") or "default"), str(s["metadata"].get("name")))
        for s in statefulsets
    }
    owners = {
        (p.namespace, p.owner_name) for p in pods if p.owner_kind == "StatefulSet" and p.owner_name
    }
    return owners - known


class Reader:
    """Builds the snapshot from the cache, and says which pods are ours."""

    def __init__(
        self,
        adapter: KubeAdapter,
        policy: Policy,
        config: BinderConfig,
        cache: ClusterCache,
        parse_cache: ParseCache,
        refusals: Refusals,
        note_decision: NoteDecision,
        forget: Callable[[PodKey], None],
    ) -> None:
        self.adapter = adapter
        self.policy = policy
        self.config = config
        self.cache = cache
        self.parse_cache = parse_cache
        self.refusals = refusals
        self.note_decision = note_decision
        self.forget = forget
        """Told of each pending pod gone since the last read (its announcements go with it)."""
        self.lists_volumes = False
        self.owners_sought: set[tuple[str, str]] = set()
        self.sets_read_at = float("-inf")
        self.nodes_read_at = float("-inf")
        self.first_seen: dict[PodKey, float] = {}
        self.last_read: tuple[tuple[int, int], Read] | None = None
        self.reads = 0
        self.read_seconds = 0.0
        """How often, and for how long in all, the snapshot was rebuilt (logged per solve)."""
        self.read_cpu_seconds = 0.0
        """Of which this thread's CPU (the rest: waiting for the GIL, as the writes hold it)."""
        self.recent_read_seconds = 0.0
        """What a rebuild costs now: an average weighted to the latest, as the cluster grows."""
        self.ordered_pending = False
        """The last snapshot had pending members of an ordered shard (never held)."""
        self._pending = PodTally(cache, self.is_ours)
        self._pinned = (
            PodTally(cache, lambda pod: self._waiting_pin(pod) is not None)
            if config.enforce == "gate"
            else None
        )
        """Only in gate mode: a feed nobody asks would keep every changed key."""
        self.builder = SnapshotBuilder(policy, parse_cache)
        self.settling = Settling()
        self._feed = cache.pod_feed()
        self._nodes_read: dict[str, Mapping[str, Any]] = {}
        self._view: dict[PodKey, Mapping[str, Any]] = {}
        """Each pod as the snapshot reads it (ours without refused nodes, pins on their node);
        pods left out are absent."""
        self._ours: dict[PodKey, str] = {}
        self._raw: dict[PodKey, dict[str, Any]] = {}
        self._unreadable: dict[PodKey, str] = {}
        self._recheck: set[PodKey] = set()
        """Pods read again at every build though unchanged: ours that did not parse, ours while
        nodes refused for them are excluded (they lapse with time), and the pinned, which
        kube-scheduler may refuse."""
        self._pins: dict[PodKey, tuple[dict[str, Any], str, dict[str, Any]]] = {}

    # -- which pods are ours -------------------------------------------------------------

    def managed(self, pod: Mapping[str, Any]) -> bool:
        return self.policy.selects(labels(pod))

    def is_ours(self, pod: Mapping[str, Any]) -> bool:
        """A pending managed pod this binder must place, by the enforcement mode's marker."""
        pod_spec = spec(pod)
        if pod_spec.get("nodeName") or _deleting(pod) or _terminal(pod) or not self.managed(pod):
            return False
        gates = gate_names(pod)
        if self.config.enforce == "gate":
            return self.config.gate in gates
        return pod_spec.get("schedulerName") == self.policy.scheduler_name and not gates

    def pinned_waiting(self) -> int:
        """Gate mode: pods pinned (gate lifted) that kube-scheduler has not bound yet: work
        already handed down the pipeline, counted from the cache without a snapshot."""
        return self._pinned.count() if self._pinned is not None else 0

    def _waiting_pin(self, pod: Mapping[str, Any]) -> str | None:
        """The node a managed pod is pinned to, gate lifted, while kube-scheduler has not
        bound it yet; else None."""
        if spec(pod).get("nodeName") or self.config.gate in gate_names(pod):
            return None
        return pinned_node(pod) if self.managed(pod) else None

    def pending_ours(self) -> int:
        """Our pending pods in the cache now, without building a snapshot: at least as many as
        the ready shards hold, so fewer than a batch means no full batch is there."""
        return self._pending.count()

    # -- keeping the cache current -------------------------------------------------------

    def refresh(self, now: float, follow_nodes: bool, resync: Callable[[], None]) -> None:
        """Before a decision: a full list if the cache is not synced, else the periodic lists."""
        every = self.config.node_refresh_seconds
        if not self.cache.synced:
            resync()
            self.nodes_read_at = self.sets_read_at = now
        else:
            if not follow_nodes and now - self.nodes_read_at >= every:
                self.cache.refresh_nodes()
                self.nodes_read_at = now
            if now - self.sets_read_at >= every:
                self.cache.refresh_statefulsets()  # a scaled StatefulSet changes a shard's size
                self.sets_read_at = now

    def refresh_nodes(self, now: float) -> None:
        self.cache.refresh_nodes()
        self.nodes_read_at = now

    # -- the snapshot --------------------------------------------------------------------

    def read(self) -> Read:
        """The snapshot this decision works on, and which pending pods are ours.

        Rebuilt only when the cache changed since the last step: a batch window's steps mostly
        look at the same cluster, and 15,000 pods are not re-read to learn nothing.
        """
        generation = (self.cache.generation, volume_epoch(self.lists_volumes, time.monotonic()))
        if self.last_read is not None and self.last_read[0] == generation:
            return self.last_read[1]
        started, cpu = time.monotonic(), time.thread_time()
        with collector_paused():  # a new Snapshot, its members and indexes: all kept
            result = self.build()
            # Settled before the collector is back on: its first allocation after that would
            # otherwise walk every object the build made, to free nothing (a pause while this
            # thread holds the interpreter; the CPU it costs is within the runs' spread).
            self.settling.settle()
        self.read_cpu_seconds += time.thread_time() - cpu
        self.ordered_pending = any(m.ordered and m.pod.pending for m in result[0].members)
        took = time.monotonic() - started
        self.reads += 1
        self.read_seconds += took
        self.recent_read_seconds += (took - self.recent_read_seconds) * (
            1.0 if self.reads == 1 else 0.3
        )
        self.last_read = (generation, result)
        return result

    def build(self) -> Read:
        """Objects that do not parse are left out with a log line (and an event on our own
        pods) rather than stopping the binder: one bad pod must not hold up every shard.

        Only the pods the watch changed since the last build are read again (and those whose
        refused nodes lapse without an event); the snapshot follows them pod by pod
        (``SnapshotBuilder``)."""
        changes = self.cache.pod_changes(self._feed, also=self._recheck)
        if changes is None:
            self._classified_all()
            changed: set[PodKey] | None = None
        else:
            for key, pod in changes.items():
                self._classify(key, pod)
            changed = set(changes)
        nodes = dict(self.cache.nodes)
        for name in [n for n, node in nodes.items() if not self._node_reads(node)]:
            del nodes[name]
        statefulsets = self.cache.objects_statefulsets()
        ours = {k: self._ours[k] for k in sorted(self._ours)}
        raw, unreadable = dict(self._raw), dict(self._unreadable)
        parsed = [self.parse_cache.pod(raw[k]) for k in ours]  # parsed when classified
        unknown = _unknown_owners(parsed, statefulsets) - self.owners_sought
        if unknown:
            self.owners_sought |= unknown  # one extra list per new owner, not one per step
            # A StatefulSet newer than our list: its replicas are the shard's size, and
            # without them the shard would be placed before all its members arrive.
            self.cache.refresh_statefulsets()
            statefulsets = self.cache.objects_statefulsets()
        volumes, refused = volume_inputs(self.adapter, parsed, self.config.enforce == "bind")
        self.lists_volumes = bool(volumes)
        view: Mapping[PodKey, Mapping[str, Any]] = self._view
        if refused:  # bind mode binds no volume: such pods are refused, and left out
            view = {k: o for k, o in self._view.items() if k not in refused}
            changed = None
            unreadable.update({k: why for k, why in refused.items() if ours.pop(k, None)})
        snapshot = self.builder.build(nodes, view, statefulsets, volumes, changed=changed)
        self.forget_gone(raw)
        for key, reason in unreadable.items():
            self.note_decision([key], raw, "reject", reason)
            del raw[key]
        return snapshot, ours, raw

    def _node_reads(self, node: Mapping[str, Any]) -> bool:
        name = str((node.get("metadata") or {}).get("name", ""))
        if self._nodes_read.get(name) is node:
            return True  # the same object as last time, read then
        try:
            self.parse_cache.node(node, self.policy, [])
        except InputError as exc:
            log.warning("node skipped: %s", exc)
            return False
        self._nodes_read[name] = node
        return True

    def _classified_all(self) -> None:
        """Every pod read again: after a list replaced the cache."""
        self._view, self._ours, self._raw, self._unreadable = {}, {}, {}, {}
        self._recheck, self._pins = set(), {}
        for pod in self.cache.objects()[1]:
            self._classify(pod_key_of(pod), pod)

    def _classify(self, key: PodKey, pod: dict[str, Any] | None) -> None:
        """Whether a pod is ours (pending, to place), counts on a node (bound, or pinned in
        gate mode), or is left out, and how the snapshot sees it."""
        for kept in (self._view, self._ours, self._raw, self._unreadable, self._pins):
            kept.pop(key, None)
        self._recheck.discard(key)
        if pod is None:
            return
        mine = self.is_ours(pod)
        try:
            self.parse_cache.pod(pod)
        except InputError as exc:
            if mine:
                self._raw[key] = pod
                self._unreadable[key] = f"cannot read the pod: {exc}"
                self._recheck.add(key)
            log.warning("pod skipped: %s", exc)
            return
        if mine:
            self._ours[key] = f"{key[0]}/{key[1]}"
            self._raw[key] = pod
            view = self._view[key] = self.refusals.without_refused(pod)
            if view is not pod:
                # Nodes refused lately are excluded: they lapse without an event. A pod with
                # none is read again only when it changes (a refusal is recorded before its
                # pod is deleted, so a pod created after it is read with it).
                self._recheck.add(key)
        elif (pin := self._waiting_pin(pod)) is not None:
            self._recheck.add(key)
            if not self.refusals.observe(pod, pin):
                self._view[key] = self._pinned_view(key, pod, pin)
        elif spec(pod).get("nodeName") or not self.managed(pod):
            self._view[key] = pod
        # Otherwise another scheduler's pending pod: not ours to place or count.

    def _pinned_view(self, key: PodKey, pod: dict[str, Any], pin: str) -> dict[str, Any]:
        """A pinned pod counted on its node: one object while the pod is the same, so the
        snapshot does not read it again."""
        kept = self._pins.get(key)
        if kept is not None and kept[0] is pod and kept[1] == pin:
            return kept[2]
        view = {**pod, "spec": {**spec(pod), "nodeName": pin}}
        self._pins[key] = (pod, pin, view)
        return view

    def forget_gone(self, raw: Mapping[PodKey, dict[str, Any]]) -> None:
        for key in [k for k in self.first_seen if k not in raw]:
            self.first_seen.pop(key, None)
            self.forget(key)
        if self.parse_cache.size > 4 * (len(self.cache.pods) + 1000):
            live = {
                k
                for k in map(
                    ParseCache.key, [*self.cache.nodes.values(), *self.cache.pods.values()]
                )
                if k is not None
            }
            self.parse_cache.forget_except(live)

    def arrival(self, key: PodKey, pod: Mapping[str, Any], now: float) -> float:
        """When the pod started waiting: its creation time, so a restart does not reset waits."""
        created = _created(pod)
        first = self.first_seen.setdefault(key, now)
        return created if created is not None else first
