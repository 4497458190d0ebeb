"""The stock kube-scheduler with the rules people give Redis pods, one pod at a time: the demo's
third placement, beside the plan and the greedy baseline.

The rules (the strongest that per-pod specs can state, as benchmarks/real_api.py gives them to a
real kube-scheduler), read from each pod's shard and role:

* required podAntiAffinity on the hostname against the pod's own shard (shard-spread), and for
  a master against every master (master-exclusivity);
* preferred podAntiAffinity against the pod's own shard on the zone (weight 100) and the rack
  (weight 50) (replica-separation);
* for a master, a topologySpreadConstraint over its Redis cluster's masters: zone, maxSkew 1,
  whenUnsatisfiable ScheduleAnyway (master balance that never leaves a master pending).

Simulated as kube-scheduler's default profile runs them: filter (node readiness, taints,
selectors, room, required anti-affinity), then score each remaining node with
NodeResourcesFit (least allocated, weight 1), NodeResourcesBalancedAllocation (weight 1),
InterPodAffinity (weight 2) and PodTopologySpread (weight 2), each normalised to 0-100 as the
plugins do, and bind the pod to the best. kube-scheduler breaks a tie at random; here the
``tie_break`` function decides (the first name by default), so a test can try every way.

Pods are taken as an operator creates them: shard by shard, the master first. A pending pod
without a role label is its shard's master when it is the shard's first member without one.
"""

import math
from collections import Counter, defaultdict
from collections.abc import Callable

from models.cluster import Member, Node, Role
from models.plan import Plan
from models.policy import Policy
from models.snapshot import Snapshot
from solver.placement import Placement, to_plan
from solver.predicates import blocking_reason

ZONE_WEIGHT, RACK_WEIGHT = 100, 50
"""The preferred anti-affinity weights against the pod's own shard."""
PLUGIN_WEIGHTS = {"fit": 1, "balanced": 1, "affinity": 2, "spread": 2}
"""kube-scheduler's default score plugin weights (the ones that differ between nodes here)."""
NO_NODE = "stock rules: no node passes kube-scheduler's filter"

TieBreak = Callable[[list[Node]], Node]


def _first(nodes: list[Node]) -> Node:
    return min(nodes, key=lambda n: n.name)


def _order(snapshot: Snapshot) -> list[tuple[Member, Role]]:
    """Pending members in creation order with the role each is created with."""
    todo = []
    for key in sorted(snapshot.shards):
        members = snapshot.shards[key]
        pending = sorted(
            (m for m in members if m.pod.pending and not m.pod.deleting), key=lambda m: m.key
        )
        has_master = any(m.role is Role.MASTER for m in members)
        roles = []
        for m in pending:
            role = m.role
            if role is None:
                role = Role.REPLICA if has_master else Role.MASTER
                has_master = True
            roles.append((m, role))
        roles.sort(key=lambda mr: (mr[1] is not Role.MASTER, mr[0].key))
        todo.extend(roles)
    return todo


class _State:
    """What runs (and has been bound by this simulation) per node and per domain."""

    def __init__(self, snapshot: Snapshot) -> None:
        self.nodes = snapshot.node_by_name
        self.used: dict[str, list[int]] = defaultdict(lambda: [0, 0, 0])
        self.masters: Counter[str] = Counter()
        """Masters (any cluster) per node."""
        self.shard_in: dict[tuple[str, str, str | None], int] = defaultdict(int)
        """(shard, level, domain) -> members there."""
        self.cluster_masters: dict[tuple[str, str | None], int] = defaultdict(int)
        """(cluster, zone) -> masters there."""
        for pod in snapshot.other_pods:
            if pod.node_name in self.nodes:
                self._use(pod.node_name, pod.requests.cpu, pod.requests.memory, pod.requests.pods)
        for m in snapshot.members:
            if not m.pod.pending and m.pod.node_name in self.nodes:
                self.take(self.nodes[m.pod.node_name], m, m.role or Role.REPLICA)

    def _use(self, name: str, cpu: int, memory: int, pods: int) -> None:
        used = self.used[name]
        used[0] += cpu
        used[1] += memory
        used[2] += pods

    def take(self, node: Node, m: Member, role: Role) -> None:
        r = m.pod.requests
        self._use(node.name, r.cpu, r.memory, r.pods)
        for level in ("host", "rack", "zone"):
            self.shard_in[(m.shard_key, level, node.domain(level))] += 1
        if role is Role.MASTER:
            self.masters[node.name] += 1
            self.cluster_masters[(m.cluster, node.zone)] += 1

    def fits(self, node: Node, m: Member, role: Role) -> bool:
        r, used, room = m.pod.requests, self.used[node.name], node.allocatable
        if used[0] + r.cpu > room.cpu or used[1] + r.memory > room.memory:
            return False
        if used[2] + r.pods > room.pods or blocking_reason(m.pod, node) is not None:
            return False
        if self.shard_in[(m.shard_key, "host", node.host)]:
            return False  # required anti-affinity: the own shard, per hostname
        return role is not Role.MASTER or not self.masters[node.name]

    def fractions(self, node: Node, m: Member) -> tuple[float, float]:
        used, room, r = self.used[node.name], node.allocatable, m.pod.requests
        cpu = (used[0] + r.cpu) / room.cpu if room.cpu else 1.0
        memory = (used[1] + r.memory) / room.memory if room.memory else 1.0
        return min(cpu, 1.0), min(memory, 1.0)


def _normalised_up(raw: dict[str, float]) -> dict[str, float]:
    """InterPodAffinity's normalisation: 100 * (s - min) / (max - min), 0 when all equal."""
    low, high = min(raw.values()), max(raw.values())
    return {k: 100 * (v - low) / (high - low) if high > low else 0.0 for k, v in raw.items()}


def _normalised_down(raw: dict[str, float]) -> dict[str, float]:
    """PodTopologySpread's: 100 * (max + min - s) / max, 100 when every count is 0."""
    low, high = min(raw.values()), max(raw.values())
    return {k: 100 * (high + low - v) / high if high else 100.0 for k, v in raw.items()}


def _scores(
    state: _State, feasible: list[Node], m: Member, role: Role, zones: int
) -> dict[str, float]:
    fit, balanced, affinity, spread = {}, {}, {}, {}
    for node in feasible:
        cpu, memory = state.fractions(node, m)
        fit[node.name] = ((1 - cpu) * 100 + (1 - memory) * 100) / 2
        balanced[node.name] = (1 - abs(cpu - memory) / 2) * 100
        # Each same-shard pod in the node's zone or rack counts against it, for the pod's own
        # preferred terms and for the existing pod's (symmetric) ones alike.
        against = ZONE_WEIGHT * state.shard_in[(m.shard_key, "zone", node.zone)]
        against += RACK_WEIGHT * state.shard_in[(m.shard_key, "rack", node.rack)]
        affinity[node.name] = -2.0 * against
        if role is Role.MASTER:
            count = state.cluster_masters[(m.cluster, node.zone)]
            spread[node.name] = count * math.log(zones + 2)  # maxSkew 1: no offset
    total = {name: 0.0 for name in fit}
    parts = [("fit", fit), ("balanced", balanced), ("affinity", _normalised_up(affinity))]
    if spread:
        parts.append(("spread", _normalised_down(spread)))
    for plugin, scores in parts:
        for name, score in scores.items():
            total[name] += PLUGIN_WEIGHTS[plugin] * math.floor(score)
    return total


def stock_placement(snapshot: Snapshot, policy: Policy, tie_break: TieBreak = _first) -> Placement:
    """Where kube-scheduler puts the pending Redis pods under the stock rules, one at a time."""
    state = _State(snapshot)
    zones = len({n.zone for n in snapshot.nodes if n.zone is not None})
    placement = Placement()
    for m, role in _order(snapshot):
        feasible = [n for n in snapshot.nodes if state.fits(n, m, role)]
        if not feasible:
            placement.unplaced[m.key] = NO_NODE
            continue
        scores = _scores(state, feasible, m, role, zones)
        best = max(scores.values())
        node = tie_break([n for n in feasible if scores[n.name] == best])
        state.take(node, m, role)
        placement.node[m.key] = node.name
        placement.role[m.key] = role
    return placement


def stock_plan(snapshot: Snapshot, policy: Policy, tie_break: TieBreak = _first) -> Plan:
    placement = stock_placement(snapshot, policy, tie_break)
    status = "FEASIBLE" if not placement.unplaced else "INFEASIBLE"
    return to_plan(snapshot, placement, "place", status)  # type: ignore[arg-type]
