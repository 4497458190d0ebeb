"""What every node can still take: free room, master room, and how much of it stays under a
memory-utilisation ceiling.

The three levels (zones, racks, nodes) all count with the same numbers, so they are worked out
once here. The load-balance term is the highest memory utilisation (percent, floored) among nodes
that host a Redis pod; a node can take a new member and stay at or below ``t`` percent exactly
when its memory after the member is at most ``((t + 1) * allocatable - 1) // 100``. Summed over a
domain, the members of one kind that fit under every ceiling ``t`` form a table the zone and rack
models index by ``t``: exact for one kind of member, a valid relaxation for several.
"""

import math
from dataclasses import dataclass, field
from functools import reduce

import numpy as np

from models.cluster import Node, Pod
from models.policy import Policy
from models.snapshot import Snapshot
from solver.predicates import blocking_reason, node_accepts_new_pods
from solver.volumes import VolumeSlots

UNBOUNDED_SLOTS = 1_000_000
"""Members a node could take of a kind that requests nothing at all."""
CPU, MEMORY, PODS = 0, 1, 2


@dataclass(frozen=True)
class Kind:
    """Pending members that are interchangeable for every node: same requests and constraints."""

    index: int
    requests: tuple[int, int, int]
    """cpu (millicores), memory (bytes), pod slots."""
    pod: Pod
    """A representative pod, for the readiness, taint, selector and affinity predicates."""


def constraint_signature(pod: Pod) -> tuple[object, ...]:
    return (
        pod.tolerations,
        tuple(sorted(pod.node_selector.items())),
        pod.affinity_terms,
        tuple(n.rule for n in pod.volumes),
    )


def kind_key(pod: Pod) -> tuple[object, ...]:
    r = pod.requests
    return ((r.cpu, r.memory, r.pods), constraint_signature(pod))


@dataclass
class NodeRoom:
    index: int
    node: Node
    free: list[int]
    """cpu, memory, pods left after everything that stays on the node."""
    alloc_memory: int
    used_memory: int
    masters: int
    """Masters that stay on the node."""
    hosts_member: bool
    """A managed member stays on it: its utilisation already counts."""
    eligible: frozenset[int]
    """Kinds whose pods the node accepts (capacity aside)."""

    @property
    def zone(self) -> str:
        return self.node.zone or ""

    @property
    def rack(self) -> str:
        return self.node.rack

    @property
    def host(self) -> str:
        return self.node.host

    def utilisation(self, extra_memory: int = 0) -> int:
        """Percent, floored, as the evaluator counts it; 0 for a node without memory."""
        if self.alloc_memory <= 0:
            return 0
        return 100 * (self.used_memory + extra_memory) // self.alloc_memory


def utilisation_floor(snapshot: Snapshot, used_memory: dict[str, int], hosting: set[str]) -> int:
    """The load-balance term of the members that stay: the fullest node hosting one of them."""
    floor = 0
    for node in snapshot.nodes:
        if node.name in hosting and node.allocatable.memory > 0:
            floor = max(floor, 100 * used_memory.get(node.name, 0) // node.allocatable.memory)
    return floor


@dataclass
class Rooms:
    """Every node that may take a new member, with its room, plus the kinds of pending members."""

    nodes: list[NodeRoom]
    kinds: list[Kind]
    cap: int
    """rules.maxMastersPerNode."""
    floor: int
    """Lowest possible load-balance utilisation: the fullest node hosting a member that stays."""
    ceiling: int
    """Highest utilisation any placement can reach (100, or more on an over-committed node)."""
    units: tuple[int, int, int]
    """Divisors that keep aggregate capacities small and exact: every pending request is a
    multiple of its resource's unit, so ``floor(room / unit)`` loses nothing."""
    by_zone: dict[str, list[int]] = field(default_factory=dict)
    volumes: VolumeSlots = field(default_factory=VolumeSlots)
    """Free local PVs per node: a kind with an unbound local claim takes one each."""
    _slots: dict[tuple[int, bool], np.ndarray] = field(default_factory=dict, repr=False)
    _memory: np.ndarray | None = field(default=None, repr=False)

    @property
    def levels(self) -> int:
        """How many utilisation ceilings there are: floor, floor + 1, ..., ceiling."""
        return self.ceiling - self.floor + 1

    def memory_room(self, room: NodeRoom, t: int) -> int:
        """Memory the node can still take and stay at or below ``t`` percent."""
        if room.alloc_memory <= 0:
            return room.free[MEMORY]
        under = ((t + 1) * room.alloc_memory - 1) // 100 - room.used_memory
        return min(room.free[MEMORY], under)

    def fits(
        self, room: NodeRoom, kind: Kind, t: int | None, taken: list[int] | None = None
    ) -> bool:
        """Whether one more member of ``kind`` fits (under ceiling ``t``, when given)."""
        req = kind.requests
        used = taken or [0, 0, 0]
        memory = room.free[MEMORY] if t is None else self.memory_room(room, t)
        return (
            req[CPU] + used[CPU] <= room.free[CPU]
            and req[MEMORY] + used[MEMORY] <= memory
            and req[PODS] + used[PODS] <= room.free[PODS]
        )

    def slot_matrix(self, kind: int, master: bool) -> np.ndarray:
        """Per node (rows) and ceiling (columns): members of the kind it can take.

        ``master`` counts only the members that may be masters (the master cap minus the masters
        that stay). Cached: the zone and rack models read the same matrix.
        """
        key = (kind, master)
        cached = self._slots.get(key)
        if cached is not None:
            return cached
        k = self.kinds[kind]
        req = k.requests
        n, levels = len(self.nodes), self.levels
        free = np.array([r.free for r in self.nodes], dtype=object if self._huge() else np.int64)
        free = free.reshape(n, 3)
        slots = np.full((n, levels), UNBOUNDED_SLOTS, dtype=free.dtype)
        if req[CPU] > 0:
            slots = np.minimum(slots, (np.maximum(free[:, CPU], 0) // req[CPU])[:, None])
        if req[PODS] > 0:
            slots = np.minimum(slots, (np.maximum(free[:, PODS], 0) // req[PODS])[:, None])
        if req[MEMORY] > 0:
            slots = np.minimum(slots, np.maximum(self.memory_matrix(), 0) // req[MEMORY])
        eligible = np.array([kind in r.eligible for r in self.nodes], dtype=bool)
        slots[~eligible, :] = 0
        if self.volumes.active and k.pod.volumes:
            pvs = np.array([self.volumes.count(r.node.name, k.pod) for r in self.nodes])
            slots = np.minimum(slots, np.maximum(pvs, 0).astype(slots.dtype)[:, None])
        if master:
            room = np.array([max(0, self.cap - r.masters) for r in self.nodes], dtype=slots.dtype)
            slots = np.minimum(slots, room[:, None])
        self._slots[key] = slots
        return slots

    def memory_matrix(self) -> np.ndarray:
        """Per node and ceiling: memory (bytes) the node can take and stay under the ceiling."""
        if self._memory is None:
            dtype = object if self._huge() else np.int64
            t = np.arange(self.floor, self.ceiling + 1, dtype=dtype)
            alloc = np.array([r.alloc_memory for r in self.nodes], dtype=dtype)
            used = np.array([r.used_memory for r in self.nodes], dtype=dtype)
            free = np.array([r.free[MEMORY] for r in self.nodes], dtype=dtype)
            under = ((t[None, :] + 1) * alloc[:, None] - 1) // 100 - used[:, None]
            no_alloc = alloc <= 0
            under[no_alloc, :] = free[no_alloc, None]
            self._memory = np.minimum(under, free[:, None])
        return self._memory

    def _huge(self) -> bool:
        """Whether int64 could overflow: then Python integers do the arithmetic."""
        largest = max((r.alloc_memory for r in self.nodes), default=0)
        return largest * (self.ceiling + 2) >= 2**62

    def table(self, nodes: list[int], kind: int, master: bool = False) -> list[int]:
        """Per ceiling: members of ``kind`` the given nodes can take together."""
        if not nodes:
            return [0] * self.levels
        return [int(v) for v in self.slot_matrix(kind, master)[nodes].sum(axis=0)]

    def memory_table(self, nodes: list[int]) -> list[int]:
        """Per ceiling: memory (in units) the given nodes can take together."""
        if not nodes:
            return [0] * self.levels
        unit = self.units[MEMORY]
        rooms = np.maximum(self.memory_matrix()[nodes], 0) // unit
        return [int(v) for v in rooms.sum(axis=0)]

    def total(self, nodes: list[int], resource: int) -> int:
        """Free cpu or pods (in units) of the given nodes."""
        unit = self.units[resource]
        return sum(max(0, self.nodes[i].free[resource]) // unit for i in nodes)

    def hosts(self, nodes: list[int], kind: int | None = None) -> int:
        """Distinct hosts among the nodes (accepting ``kind``, when given)."""
        return len(
            {self.nodes[i].host for i in nodes if kind is None or kind in self.nodes[i].eligible}
        )


class EligibilityCache:
    """Which kinds of pending pod each node accepts (taints, selectors, affinity), kept from
    batch to batch by a caller that solves often (solver/warm.py).

    A batch's kinds are mostly the kinds of the batch before (one StatefulSet's pods), and its
    nodes mostly the same node objects (the binder's parse cache keeps them): judging 5,000
    nodes again for each batch was a fifth of a small batch's solve. A node is judged afresh
    once it is another object (it changed), and a pod with volumes always (its free volumes
    change without the node).
    """

    def __init__(self) -> None:
        self._by_node: dict[str, tuple[Node, dict[tuple[object, ...], bool]]] = {}

    def accepts(self, pod: Pod, signature: tuple[object, ...], node: Node) -> bool:
        if pod.volumes:
            return blocking_reason(pod, node) is None
        entry = self._by_node.get(node.name)
        if entry is None or entry[0] is not node:
            entry = self._by_node[node.name] = (node, {})
        known = entry[1].get(signature)
        if known is None:
            known = entry[1][signature] = blocking_reason(pod, node) is None
        return known

    def keep_only(self, names: set[str]) -> None:
        """Forget nodes gone from the cluster, once they are many."""
        if len(self._by_node) > 2 * len(names) + 100:
            self._by_node = {k: v for k, v in self._by_node.items() if k in names}


def _accepts(pod: Pod, signature: tuple[object, ...], node: Node) -> bool:
    """Whether the node takes the pod, judged afresh (no caller keeps an EligibilityCache)."""
    return blocking_reason(pod, node) is None


def build_rooms(
    snapshot: Snapshot,
    policy: Policy,
    staying_used: dict[str, list[int]],
    staying_masters: dict[str, int],
    kinds: list[Kind],
    eligibility: EligibilityCache | None = None,
) -> Rooms:
    """Rooms for the nodes that accept new members, given what stays where it is.

    ``staying_used`` and ``staying_masters`` are, per node, the requests and masters of the
    managed members that stay (solver/levels/shapes.py Standing); every other bound pod of the
    snapshot stays too.
    """
    used: dict[str, list[int]] = {name: list(total) for name, total in staying_used.items()}
    hosting = set(staying_used)
    for pod in snapshot.other_pods:
        if pod.node_name:
            total = used.get(pod.node_name)
            if total is None:
                total = used[pod.node_name] = [0, 0, 0]
            r = pod.requests
            total[CPU] += r.cpu
            total[MEMORY] += r.memory
            total[PODS] += r.pods
    floor = utilisation_floor(snapshot, {k: v[MEMORY] for k, v in used.items()}, hosting)
    rooms: list[NodeRoom] = []
    none = [0, 0, 0]
    signatures = [(k, constraint_signature(k.pod)) for k in kinds]
    if eligibility is not None:
        eligibility.keep_only({n.name for n in snapshot.nodes})
    accepts = eligibility.accepts if eligibility is not None else _accepts
    for node in snapshot.nodes:
        if not node_accepts_new_pods(node):
            continue
        eligible = frozenset(k.index for k, sig in signatures if accepts(k.pod, sig, node))
        if not eligible:
            continue
        u = used.get(node.name, none)
        a = node.allocatable
        rooms.append(
            NodeRoom(
                index=len(rooms),
                node=node,
                free=[a.cpu - u[CPU], a.memory - u[MEMORY], a.pods - u[PODS]],
                alloc_memory=a.memory,
                used_memory=u[MEMORY],
                masters=staying_masters.get(node.name, 0),
                hosts_member=node.name in hosting,
                eligible=eligible,
            )
        )
    ceiling = max(100, floor)
    units = tuple(
        reduce(math.gcd, (k.requests[r] for k in kinds if k.requests[r] > 0), 0) or 1
        for r in (CPU, MEMORY, PODS)
    )
    result = Rooms(
        nodes=rooms,
        kinds=kinds,
        cap=policy.rules.max_masters_per_node,
        floor=floor,
        ceiling=ceiling,
        units=units,
        volumes=VolumeSlots(snapshot),
    )
    for room in rooms:
        result.by_zone.setdefault(room.zone, []).append(room.index)
    return result
