"""Stage two: turn "k members of group g into class c" into concrete nodes.

Nodes in a class are identical for every rule, so any spread that respects each node's real room,
shard-spread and the master cap keeps the solver's answer. Running members that stay in their
class stay on their very node. Members are spread evenly (most free memory first, masters to the
nodes with fewest masters) so the class average the solver balanced is what the nodes see.
"""

from collections import defaultdict

from models.cluster import Member, Node, Role
from models.resources import Resources
from solver.classes.problem import Problem
from solver.placement import Placement
from solver.predicates import blocking_reason
from solver.volumes import VolumeSlots


class _FreeRoom(dict[str, Resources]):
    """Free room per node, worked out the first time a node is looked at.

    A small batch touches a few dozen of a large cluster's nodes; computing all of them upfront
    cost more than the assignment itself.
    """

    def __init__(self, problem: Problem) -> None:
        super().__init__()
        self.problem = problem

    def __missing__(self, name: str) -> Resources:
        node = self.problem.snapshot.node_by_name[name]
        room = node.allocatable - self.problem.pod_load.get(name, Resources())
        self[name] = room
        return room


class _NodeState:
    def __init__(self, problem: Problem) -> None:
        self.problem = problem
        self.cap = problem.policy.rules.max_masters_per_node
        self.free = _FreeRoom(problem)
        self.masters: dict[str, int] = defaultdict(int)
        self.shard_hosts: dict[str, set[str]] = defaultdict(set)
        self.volumes = VolumeSlots(problem.snapshot)
        for member, fixed_node in problem.fixed_members:
            if fixed_node is not None:
                self.shard_hosts[member.shard_key].add(fixed_node.host)
                if member.role is Role.MASTER:
                    self.masters[fixed_node.name] += 1

    def passes(self, node: Node, member: Member, role: Role) -> bool:
        return (
            member.pod.requests.fits_in(self.free[node.name])
            and node.host not in self.shard_hosts[member.shard_key]
            and (role is not Role.MASTER or self.masters[node.name] < self.cap)
            and (not self.volumes.active or self.volumes.room(node.name, member.pod))
        )

    def take(self, node: Node, member: Member, role: Role) -> None:
        self.free[node.name] = self.free[node.name] - member.pod.requests
        self.shard_hosts[member.shard_key].add(node.host)
        self.volumes.take(node.name, member.pod)
        if role is Role.MASTER:
            self.masters[node.name] += 1

    def release(self, node_name: str, member: Member, role: Role) -> None:
        node = self.problem.snapshot.node_by_name[node_name]
        self.free[node_name] = self.free[node_name] + member.pod.requests
        self.shard_hosts[member.shard_key].discard(node.host)
        self.volumes.release(node_name, member.pod)
        if role is Role.MASTER:
            self.masters[node_name] -= 1


def _pick(state: _NodeState, nodes: list[Node], member: Member, role: Role) -> Node | None:
    best: Node | None = None
    best_key: tuple[int, int] | None = None
    for node in nodes:
        if not state.passes(node, member, role):
            continue
        key = (
            state.masters[node.name] if role is Role.MASTER else 0,
            -state.free[node.name].memory,
        )
        if best_key is None or key < best_key:
            best, best_key = node, key
    return best


def assign_nodes(problem: Problem, counts: dict[tuple[int, int, Role], int]) -> Placement:
    state = _NodeState(problem)
    placement = Placement()
    per_class: dict[int, list[tuple[Member, Role, int]]] = defaultdict(list)
    cursor: dict[int, int] = defaultdict(int)
    for (g, c, role), k in sorted(
        counts.items(), key=lambda kv: (kv[0][0], kv[0][1], kv[0][2].value)
    ):
        group = problem.groups[g]
        for _ in range(k):
            member = group.members[cursor[g]]
            cursor[g] += 1
            per_class[c].append((member, role, g))

    failed_shards: dict[str, str] = {}
    by_rack: dict[str, list[Node]] = defaultdict(list)
    for cls in problem.classes:
        by_rack[cls.rack].extend(cls.nodes)

    for c, items in per_class.items():
        cls = problem.classes[c]
        # Stayers first, on their own node.
        rest: list[tuple[Member, Role, int]] = []
        for member, role, g in items:
            origin = problem.groups[g].origin_node
            node = problem.snapshot.node_by_name.get(origin) if origin else None
            if (
                node is not None
                and problem.node_class.get(node.name) == c
                and state.passes(node, member, role)
            ):
                state.take(node, member, role)
                placement.node[member.key], placement.role[member.key] = node.name, role
            else:
                rest.append((member, role, g))
        rest.sort(key=lambda t: (t[1] is not Role.MASTER, -t[0].pod.requests.memory, t[0].key))
        for member, role, _ in rest:
            node = _pick(state, cls.nodes, member, role)
            if node is None:
                rack_nodes = [
                    n for n in by_rack[cls.rack] if blocking_reason(member.pod, n) is None
                ]
                node = _pick(state, rack_nodes, member, role)
            if node is None:
                failed_shards.setdefault(
                    member.shard_key, f"no node in rack {cls.rack} has room left for {member.key}"
                )
                placement.unplaced[member.key] = failed_shards[member.shard_key]
                continue
            state.take(node, member, role)
            placement.node[member.key], placement.role[member.key] = node.name, role

    if failed_shards and not problem.policy.permit.allow_partial_shards:
        for shard_key, reason in failed_shards.items():
            for member in problem.snapshot.shards[shard_key]:
                if member.pod.pending and member.key in placement.node:
                    state.release(
                        placement.node.pop(member.key), member, placement.role.pop(member.key)
                    )
                    placement.unplaced[member.key] = reason
    return placement
