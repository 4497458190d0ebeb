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


class _Cluster:
    def __init__(self, snapshot: Snapshot, policy: Policy) -> None:
        self.snapshot = snapshot
        self.cap = policy.rules.max_masters_per_node
        self.free: dict[str, Resources] = {n.name: n.allocatable for n in snapshot.nodes}
        self.masters: dict[str, int] = defaultdict(int)
        self.hosts_of_shard: dict[str, set[str]] = defaultdict(set)
        self.version: dict[str, int] = defaultdict(int)
        for pod in snapshot.other_pods:
            if pod.node_name in self.free:
                self.free[pod.node_name] = self.free[pod.node_name] - pod.requests
        for m in snapshot.members:
            node = snapshot.node_by_name.get(m.pod.node_name or "")
            if node is None:
                continue
            self.free[node.name] = self.free[node.name] - m.pod.requests
            self.hosts_of_shard[m.shard_key].add(node.host)
            if m.role is Role.MASTER:
                self.masters[node.name] += 1
        self.racks: dict[str, list[tuple[int, str, int]]] = defaultdict(list)
        self.rack_zone: dict[str, str] = {}
        for n in snapshot.nodes:
            if node_accepts_new_pods(n):
                self.racks[n.rack].append((-self.free[n.name].memory, n.name, 0))
                self.rack_zone[n.rack] = n.zone or ""
        for heap in self.racks.values():
            heapq.heapify(heap)

    def best_in_rack(self, rack: str, member: Member, role: Role) -> Node | None:
        """The node with the most free memory in the rack that passes the filter."""
        heap = self.racks[rack]
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
        heapq.heappush(
            self.racks[node.rack],
            (-self.free[node.name].memory, node.name, self.version[node.name]),
        )


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
