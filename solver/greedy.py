"""The greedy baseline: one pod at a time, as a kube-scheduler plugin would place it.

Filter: fits (readiness, taints, selectors, affinity, room), no member of the same shard on the
host, master cap. Score for a replica: 100 if its master is in another zone, 70 in the same zone but
another rack, 30 in the same rack; ties go to the node with the most free memory. It is the
comparison point for the solver and the solver's first hint. Nodes are kept in per-rack heaps by
free memory so a pod looks at a handful of nodes, not all of them.
"""

import heapq
from collections import defaultdict

from models.cluster import Member, Node, Role
from models.plan import Plan
from models.policy import Policy
from models.resources import Resources
from models.snapshot import Snapshot
from solver.placement import Placement, to_plan
from solver.predicates import blocking_reason, node_accepts_new_pods


def _add(used: dict[str, list[int]], name: str, requests: Resources) -> None:
    total = used.setdefault(name, [0, 0, 0])
    total[0] += requests.cpu
    total[1] += requests.memory
    total[2] += requests.pods


class _Room(dict[str, Resources]):
    """Free room per node, as Resources, worked out the first time a node is looked at."""

    def __init__(self, nodes: dict[str, Node], used: dict[str, list[int]]) -> None:
        super().__init__()
        self.nodes, self.used = nodes, used

    def __missing__(self, name: str) -> Resources:
        room, total = self.nodes[name].allocatable, self.used.get(name)
        if total is not None:
            room = Resources(
                cpu=room.cpu - total[0], memory=room.memory - total[1], pods=room.pods - total[2]
            )
        self[name] = room
        return room


class _Cluster:
    def __init__(self, snapshot: Snapshot, policy: Policy) -> None:
        self.snapshot = snapshot
        self.cap = policy.rules.max_masters_per_node
        self.masters: dict[str, int] = defaultdict(int)
        self.hosts_of_shard: dict[str, set[str]] = defaultdict(set)
        self.version: dict[str, int] = defaultdict(int)
        # Bound requests summed as integers, and a node's free Resources built only when a pod
        # looks at it: per-pod model arithmetic over a large running cluster costs more than the
        # whole greedy pass. Shard hosts are only tracked for shards that have pods to place.
        nodes = snapshot.node_by_name
        used: dict[str, list[int]] = {}
        for pod in snapshot.other_pods:
            if pod.node_name in nodes:
                _add(used, pod.node_name, pod.requests)
        placing = {m.shard_key for m in snapshot.members if m.pod.node_name is None}
        for m in snapshot.members:
            node = nodes.get(m.pod.node_name or "")
            if node is None:
                continue
            _add(used, node.name, m.pod.requests)
            if m.role is Role.MASTER:
                self.masters[node.name] += 1
            if placing:
                shard = m.shard_key
                if shard in placing:
                    self.hosts_of_shard[shard].add(node.host)
        self.free = _Room(nodes, used)
        # Per rack, nodes by free memory: every node for replicas, and for masters only the
        # nodes below the master cap, so a master does not wade through every node that has one.
        self.racks: dict[str, list[tuple[int, str, int]]] = defaultdict(list)
        self.master_racks: dict[str, list[tuple[int, str, int]]] = defaultdict(list)
        self.rack_zone: dict[str, str] = {}
        for n in snapshot.nodes:
            if node_accepts_new_pods(n):
                total = used.get(n.name)
                free_memory = n.allocatable.memory - (total[1] if total else 0)
                self.racks[n.rack].append((-free_memory, n.name, 0))
                if self.masters[n.name] < self.cap:
                    self.master_racks[n.rack].append((-free_memory, n.name, 0))
                self.rack_zone[n.rack] = n.zone or ""
        for heaps in (self.racks, self.master_racks):
            for heap in heaps.values():
                heapq.heapify(heap)

    def best_in_rack(self, rack: str, member: Member, role: Role) -> Node | None:
        """The node with the most free memory in the rack that passes the filter."""
        heap = (self.master_racks if role is Role.MASTER else self.racks)[rack]
        skipped: list[tuple[int, str, int]] = []
        found: Node | None = None
        while heap:
            entry = heapq.heappop(heap)
            _, name, ver = entry
            if ver != self.version[name]:
                continue  # stale
            skipped.append(entry)
            if self.free[name].memory < member.pod.requests.memory:
                break  # sorted by free memory: nothing further fits
            node = self.snapshot.node_by_name[name]
            if self._passes(node, member, role):
                found = node
                break
        for entry in skipped:
            heapq.heappush(heap, entry)
        return found

    def _passes(self, node: Node, member: Member, role: Role) -> bool:
        if not member.pod.requests.fits_in(self.free[node.name]):
            return False
        if node.host in self.hosts_of_shard[member.shard_key]:
            return False
        if role is Role.MASTER and self.masters[node.name] >= self.cap:
            return False
        return blocking_reason(member.pod, node) is None

    def take(self, node: Node, member: Member, role: Role) -> None:
        self.free[node.name] = self.free[node.name] - member.pod.requests
        self.hosts_of_shard[member.shard_key].add(node.host)
        if role is Role.MASTER:
            self.masters[node.name] += 1
        self.version[node.name] += 1
        entry = (-self.free[node.name].memory, node.name, self.version[node.name])
        heapq.heappush(self.racks[node.rack], entry)
        if self.masters[node.name] < self.cap:
            heapq.heappush(self.master_racks[node.rack], entry)


def greedy_placement(snapshot: Snapshot, policy: Policy) -> Placement:
    state = _Cluster(snapshot, policy)
    placement = Placement()
    master_node: dict[str, Node | None] = {}
    for key, members in snapshot.shards.items():
        running_master = next(
            (m for m in members if m.role is Role.MASTER and not m.pod.pending), None
        )
        master_node[key] = (
            snapshot.node_by_name.get(running_master.pod.node_name or "")
            if running_master
            else None
        )
    # Masters first within each shard, so replicas can be scored against them.
    order = sorted(
        snapshot.pending,
        key=lambda m: (m.shard_key, m.role is not Role.MASTER, m.role is None, m.key),
    )
    has_master = {k: any(m.role is Role.MASTER for m in ms) for k, ms in snapshot.shards.items()}
    for member in order:
        if member.pod.deleting:
            continue
        role = member.role
        if role is None:
            role = Role.REPLICA if has_master[member.shard_key] else Role.MASTER
        node = _choose(state, member, role, master_node.get(member.shard_key))
        if node is None:
            placement.unplaced[member.key] = "greedy: no node passes the filter"
            continue
        state.take(node, member, role)
        placement.node[member.key] = node.name
        placement.role[member.key] = role
        if role is Role.MASTER:
            has_master[member.shard_key] = True
            master_node[member.shard_key] = node
    return placement


def _choose(state: _Cluster, member: Member, role: Role, master: Node | None) -> Node | None:
    best: tuple[int, int, str] | None = None
    best_node: Node | None = None
    for rack in state.racks:
        node = state.best_in_rack(rack, member, role)
        if node is None:
            continue
        score = 0
        if role is Role.REPLICA and master is not None:
            if node.zone != master.zone:
                score = 100
            elif node.rack != master.rack:
                score = 70
            else:
                score = 30
        key = (score, state.free[node.name].memory, node.name)
        if best is None or key[:2] > best[:2] or (key[:2] == best[:2] and key[2] < best[2]):
            best, best_node = key, node
    return best_node


def greedy_plan(snapshot: Snapshot, policy: Policy) -> Plan:
    placement = greedy_placement(snapshot, policy)
    status = "FEASIBLE" if not placement.unplaced else "INFEASIBLE"
    return to_plan(snapshot, placement, "place", status)  # type: ignore[arg-type]
