"""The stock kube-scheduler with the rules people give Redis pods, one pod at a time: the demo's
third placement, beside the plan and the greedy baseline.

The rules (the strongest that per-pod specs can state; ``stock_rules`` writes them as a pod spec
says them), read from each pod's shard and role:

* required podAntiAffinity on the hostname against the pod's own shard (shard-spread), and for
  a master against every master (master-exclusivity);
* preferred podAntiAffinity against the pod's own shard on the zone (weight 100) and the rack
  (weight 50) (replica-separation);
* for a master, a topologySpreadConstraint over its Redis cluster's masters: zone, maxSkew 1,
  whenUnsatisfiable ScheduleAnyway (master balance that never leaves a master pending).

Simulated as kube-scheduler's default profile runs them: filter (node readiness, taints,
selectors, room, required anti-affinity), then score each remaining node with
NodeResourcesFit (least allocated, weight 1), NodeResourcesBalancedAllocation (weight 1),
InterPodAffinity (weight 2) and PodTopologySpread (weight 2), each normalised to an integer
0-100 as the plugins do, and bind the pod to the best. kube-scheduler breaks a tie at random; here the
``tie_break`` function decides (the first name by default), so a test can try every way.

Pods are taken as an operator creates them: shard by shard, the master first. A pending pod
without a role label is its shard's master when it is the shard's first member without one.
tests/e2e/test_stock_simulation_e2e.py holds the simulation to a real kube-scheduler.
"""

import math
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

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
MAX_SCORE = 100
"""Every plugin's normalised score is an integer from 0 to this."""
NO_NODE = "stock rules: no node passes kube-scheduler's filter"

TieBreak = Callable[[list[Node]], Node]


def _first(nodes: list[Node]) -> Node:
    return min(nodes, key=lambda n: n.name)


def _term(labels: dict[str, str], topology_key: str) -> dict[str, Any]:
    return {"labelSelector": {"matchLabels": labels}, "topologyKey": topology_key}


def stock_rules(
    policy: Policy,
    cluster: str,
    shard: str,
    master: bool,
    when_unsatisfiable: Literal["ScheduleAnyway", "DoNotSchedule"] = "ScheduleAnyway",
) -> dict[str, Any]:
    """The pod spec fields (affinity, topologySpreadConstraints) that state the stock rules for
    one member of Redis cluster ``cluster`` (its label value) and ``shard``. The simulation
    takes ``ScheduleAnyway``; ``DoNotSchedule`` is the stricter spread a user may write."""
    labels, topology = policy.labels, policy.topology
    same_shard = {**policy.selector, labels.cluster: cluster, labels.shard: shard}
    required = [_term(same_shard, topology.host)]
    if master:
        required.append(_term({**policy.selector, labels.role: Role.MASTER.value}, topology.host))
    spec: dict[str, Any] = {
        "affinity": {
            "podAntiAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": required,
                "preferredDuringSchedulingIgnoredDuringExecution": [
                    {"weight": ZONE_WEIGHT, "podAffinityTerm": _term(same_shard, topology.zone)},
                    {"weight": RACK_WEIGHT, "podAffinityTerm": _term(same_shard, topology.rack)},
                ],
            }
        }
    }
    if master:
        masters = {**policy.selector, labels.cluster: cluster, labels.role: Role.MASTER.value}
        spec["topologySpreadConstraints"] = [
            {
                "maxSkew": 1,
                "topologyKey": topology.zone,
                "whenUnsatisfiable": when_unsatisfiable,
                "labelSelector": {"matchLabels": masters},
            }
        ]
    return spec


def creation_order(snapshot: Snapshot) -> list[tuple[Member, Role]]:
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


def _normalised_up(raw: dict[str, int]) -> dict[str, int]:
    """InterPodAffinity's normalisation: 100 * (s - min) / (max - min), 0 when all equal."""
    low, high = min(raw.values()), max(raw.values())
    return {
        k: int(MAX_SCORE * (v - low) / (high - low)) if high > low else 0 for k, v in raw.items()
    }


def _normalised_down(raw: dict[str, int]) -> dict[str, int]:
    """PodTopologySpread's: 100 * (max + min - s) // max on integer counts, 100 when all are 0."""
    low, high = min(raw.values()), max(raw.values())
    return {k: MAX_SCORE * (high + low - v) // high if high else MAX_SCORE for k, v in raw.items()}


def _spread_raw(count: int, zones: int) -> int:
    """PodTopologySpread's raw score: the count weighted by log(zones + 2), rounded half away
    from zero (Go's math.Round) before normalising; maxSkew 1 adds nothing."""
    return math.floor(count * math.log(zones + 2) + 0.5)


def _scores(state: _State, feasible: list[Node], m: Member, role: Role) -> dict[str, float]:
    """kube-scheduler's weighted sum of its plugins' integer scores. PodTopologySpread rounds
    its raw scores before normalising them, and weighs counts by the zones of the nodes that
    pass the filter: unrounded, a master lands in another zone than the real scheduler puts it
    (tests/e2e/test_stock_simulation_e2e.py)."""
    fit, balanced, affinity, spread = {}, {}, {}, {}
    zones = len({n.zone for n in feasible if n.zone is not None})
    for node in feasible:
        cpu, memory = state.fractions(node, m)
        fit[node.name] = int(((1 - cpu) * MAX_SCORE + (1 - memory) * MAX_SCORE) / 2)
        balanced[node.name] = int((1 - abs(cpu - memory) / 2) * MAX_SCORE)
        # Each same-shard pod in the node's zone or rack counts against it, for the pod's own
        # preferred terms and for the existing pod's (symmetric) ones alike.
        against = ZONE_WEIGHT * state.shard_in[(m.shard_key, "zone", node.zone)]
        against += RACK_WEIGHT * state.shard_in[(m.shard_key, "rack", node.rack)]
        affinity[node.name] = -2 * against
        if role is Role.MASTER:
            spread[node.name] = _spread_raw(state.cluster_masters[(m.cluster, node.zone)], zones)
    total = {name: 0.0 for name in fit}
    parts = [("fit", fit), ("balanced", balanced), ("affinity", _normalised_up(affinity))]
    if spread:
        parts.append(("spread", _normalised_down(spread)))
    for plugin, scores in parts:
        for name, score in scores.items():
            total[name] += PLUGIN_WEIGHTS[plugin] * score
    return total


@dataclass(frozen=True)
class Step:
    """One pod's scheduling cycle: the nodes that pass the filter, each with its total score."""

    member: Member
    role: Role
    scores: dict[str, float]

    @property
    def best(self) -> list[str]:
        """The nodes kube-scheduler picks among at random."""
        top = max(self.scores.values())
        return sorted(name for name, score in self.scores.items() if score == top)


Pick = Callable[[Step], str]
"""Which of a step's nodes the pod is bound to."""


def stock_steps(snapshot: Snapshot, pick: Pick) -> Placement:
    """The pending Redis pods one at a time, each bound where ``pick`` says among the nodes
    that pass the filter: a replay of what a real kube-scheduler did can follow its picks."""
    state = _State(snapshot)
    placement = Placement()
    for m, role in creation_order(snapshot):
        feasible = [n for n in snapshot.nodes if state.fits(n, m, role)]
        if not feasible:
            placement.unplaced[m.key] = NO_NODE
            continue
        node = state.nodes[pick(Step(m, role, _scores(state, feasible, m, role)))]
        state.take(node, m, role)
        placement.node[m.key] = node.name
        placement.role[m.key] = role
    return placement


def stock_placement(snapshot: Snapshot, policy: Policy, tie_break: TieBreak = _first) -> Placement:
    """Where kube-scheduler puts the pending Redis pods under the stock rules, one at a time."""
    nodes = snapshot.node_by_name
    return stock_steps(snapshot, lambda step: tie_break([nodes[n] for n in step.best]).name)


def stock_plan(snapshot: Snapshot, policy: Policy, tie_break: TieBreak = _first) -> Plan:
    placement = stock_placement(snapshot, policy, tie_break)
    status = "FEASIBLE" if not placement.unplaced else "INFEASIBLE"
    return to_plan(snapshot, placement, "place", status)  # type: ignore[arg-type]
