"""Volume topology, the encodings' face of ``fits``: where a pod's claims let it run.

Two parts, shared by greedy, the level models and the node-class model (the checker has its
own reading, solver/check_volumes.py):

* ``volume_reason``: a per-pod node filter, called from ``predicates.blocking_reason`` so every
  encoding's existing candidate filter applies it. A bound claim allows only its PV's node
  affinity; a ``local`` claim a node holding one of its matching free PVs; a ``zonal`` claim the
  class's allowed topologies; a ``held`` claim no node at all.
* ``VolumeSlots``: the free PVs of each local class on each node, as a count that pods with an
  unbound local claim consume, so two pods never count on one PV. Counted per storage class: the
  filter has already checked that a node holds a PV of the right size and access modes for each
  claim; where a node's PVs of one class differ in size the count can promise a PV that only a
  larger claim could not use, which the checker's exact matching reports.
"""

from collections import Counter

from models.cluster import FreeVolume, Node, Pod, SelectorTerm
from models.snapshot import Snapshot
from solver import predicates

UNLIMITED = 1_000_000
"""How many pods a node could take, as far as volumes go, of pods without a local claim."""


HOSTNAME = "kubernetes.io/hostname"


def admits(terms: tuple[SelectorTerm, ...], node: Node) -> bool:
    """Node affinity terms (ORed) of a PV or a class's allowed topologies; none: every node."""
    return not terms or any(predicates.term_holds(t, node) for t in terms)


def named_hosts(terms: tuple[SelectorTerm, ...]) -> frozenset[str] | None:
    """The hostnames a local PV's affinity names (``kubernetes.io/hostname In [...]`` terms
    only), so it is matched to its nodes by lookup; None for any other affinity."""
    hosts: set[str] = set()
    for term in terms:
        exprs = term.match_expressions
        if term.match_fields or len(exprs) != 1:
            return None
        if exprs[0].key != HOSTNAME or exprs[0].operator != "In":
            return None
        hosts.update(exprs[0].values)
    return frozenset(hosts) if terms else None


class _LocalIndex:
    """A local rule's free PVs, split into those found by hostname and the others."""

    def __init__(self, volumes: tuple[FreeVolume, ...]) -> None:
        self.hosts: set[str] = set()
        self.others: list[FreeVolume] = []
        for v in volumes:
            named = named_hosts(v.terms)
            if named is None:
                self.others.append(v)
            else:
                self.hosts |= named

    def admits(self, node: Node) -> bool:
        if node.labels.get(HOSTNAME) in self.hosts:
            return True
        return any(admits(v.terms, node) for v in self.others)


_INDEXES: dict[int, tuple[object, _LocalIndex]] = {}
"""By the identity of a rule's volumes tuple (kept alive beside it): every pod of one claim
size shares it, and a cluster may hold thousands of PVs."""


def _local_index(volumes: tuple[FreeVolume, ...]) -> _LocalIndex:
    cached = _INDEXES.get(id(volumes))
    if cached is not None and cached[0] is volumes:
        return cached[1]
    if len(_INDEXES) > 256:
        _INDEXES.clear()
    index = _LocalIndex(volumes)
    _INDEXES[id(volumes)] = (volumes, index)
    return index


def volume_reason(pod: Pod, node: Node) -> str | None:
    """Why the pod's volumes keep it off the node, naming the claim and PV; None if they don't."""
    for need in pod.volumes:
        rule = need.rule
        if rule.kind == "held":
            return rule.reason
        if rule.kind == "bound" and not admits(rule.terms, node):
            return f"claim {need.claim} is bound to pv {need.volume}, whose node affinity excludes the node"
        if rule.kind == "zonal" and not admits(rule.terms, node):
            return f"claim {need.claim}: storage class allowedTopologies exclude the node"
        if rule.kind == "local" and not _local_index(rule.volumes).admits(node):
            return f"claim {need.claim}: no free pv of storage class {rule.pool} that matches it is on the node"
    return None


def held_reason(pod: Pod) -> str | None:
    """Why the pod's claims hold it off every node (an Immediate claim not bound yet...)."""
    for need in pod.volumes:
        if need.rule.kind == "held":
            return f"{need.rule.reason}: the pod stays pending"
    return None


def local_demand(pod: Pod) -> Counter[str]:
    """Free PVs the pod takes from its node, by storage class (its unbound local claims)."""
    return Counter(n.rule.pool for n in pod.volumes if n.rule.kind == "local")


def _pools(snapshot: Snapshot) -> set[str]:
    return {n.rule.pool for m in snapshot.members for n in m.pod.volumes if n.rule.kind == "local"}


class VolumeSlots:
    """Free local PVs per node and storage class, as the pods placed so far leave them."""

    def __init__(self, snapshot: Snapshot | None = None) -> None:
        self.free: dict[str, Counter[str]] = {}
        pools = _pools(snapshot) if snapshot is not None else set()
        if snapshot is None or not pools:
            return
        by_host: dict[str, list[Node]] = {}
        for node in snapshot.nodes:
            by_host.setdefault(node.labels.get(HOSTNAME, ""), []).append(node)
        for v in snapshot.free_volumes:
            if v.storage_class not in pools:
                continue
            named = named_hosts(v.terms)
            nodes = (
                snapshot.nodes
                if named is None
                else [n for h in sorted(named) for n in by_host.get(h, [])]
            )
            for node in nodes:
                if admits(v.terms, node):
                    self.free.setdefault(node.name, Counter())[v.storage_class] += 1
        bound = [m.pod for m in snapshot.members if m.pod.node_name] + list(snapshot.other_pods)
        for pod in bound:
            if pod.node_name:
                self.take(pod.node_name, pod)

    @property
    def active(self) -> bool:
        """Whether any pod has a local claim to count at all."""
        return bool(self.free)

    def room(self, node: str, pod: Pod) -> bool:
        """Whether the node still holds a free PV for each of the pod's local claims."""
        return self.count(node, pod) > 0

    def count(self, node: str, pod: Pod) -> int:
        """How many pods like ``pod`` the node's free PVs still serve."""
        demand = local_demand(pod)
        if not demand:
            return UNLIMITED
        free = self.free.get(node, Counter())
        return min(free[pool] // k for pool, k in demand.items())

    def key(self, node: str) -> tuple[tuple[str, int], ...]:
        """The node's free PV counts, for grouping nodes that are alike."""
        return tuple(sorted(self.free.get(node, Counter()).items()))

    def take(self, node: str, pod: Pod, sign: int = 1) -> None:
        for pool, k in local_demand(pod).items():
            free = self.free.setdefault(node, Counter())
            free[pool] -= sign * k

    def release(self, node: str, pod: Pod) -> None:
        self.take(node, pod, -1)
