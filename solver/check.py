"""The independent checker: judges any finished plan against the placement rules.

It shares nothing with the CP-SAT encoding on purpose: every rule is re-read from its meaning
(DESIGN.md "Placement rules", the objective spec) and checked plainly on the final node-level
placement, so a bug in the model shows up as a disagreement instead of being repeated here.
Everything is dicts and counters: linear in nodes + pods, never pods x nodes.

Conventions used by every rule:

* The *final placement* of a member is its plan assignment (or where it runs now if the plan
  leaves it out). A pod listed in ``plan.unplaced`` has no node whatever its assignment says.
* A member is *placed* when it has a node name, *alive* when that node is in the snapshot.
  Rules about topology (hosts, racks, zones) only see alive members: a node that is not in the
  snapshot has no host, rack or zone.
"""

import re
from collections import Counter, defaultdict
from collections.abc import Iterable
from dataclasses import dataclass

from models.cluster import Member, Node, Pod, Role, SelectorRequirement, Taint, Toleration
from models.plan import Assignment, DomainLoss, Plan, Severity, Unplaced, Violation
from models.policy import LEVELS, Level, Policy
from models.resources import Resources
from models.snapshot import Snapshot

SCHEDULING_EFFECTS = frozenset({"NoSchedule", "NoExecute"})
"""Taint effects that keep a pod off a node (PreferNoSchedule only discourages)."""

_INTEGER = re.compile(r"^[+-]?\d+$")


# --------------------------------------------------------------------------- final placement


@dataclass(frozen=True, slots=True)
class FinalMember:
    """One member after the plan: where it ends, as what, and whether the plan sends it there."""

    member: Member
    node: str | None
    role: Role
    action: str
    arrives: bool
    """The plan places or moves it onto ``node``: only such members are held to ``fits``."""


def final_members(snapshot: Snapshot, plan: Plan) -> list[FinalMember]:
    """Every managed member's final state; members the plan omits stay as they are."""
    by_pod: dict[str, Assignment] = {a.pod: a for a in plan.assignments}
    unplaced = {u.pod for u in plan.unplaced}
    finals: list[FinalMember] = []
    for member in snapshot.members:
        current = member.pod.node_name
        assignment = by_pod.get(member.key)
        if assignment is None:
            node, role, action = current, member.role or Role.REPLICA, "keep"
        else:
            node, role, action = assignment.node, Role(assignment.role), assignment.action
        if member.key in unplaced:
            node = None
        # A "keep" that changes node is a move in all but name: check it like one.
        arrives = node is not None and (action in ("place", "move") or node != current)
        finals.append(FinalMember(member, node, role, action, arrives))
    return finals


def final_placement(snapshot: Snapshot, plan: Plan) -> dict[str, tuple[str | None, Role]]:
    """Pod key -> (final node or None, final role) for every managed member.

    Members missing from the plan keep their current node and role; a pending member without a
    role that the plan leaves out is unplaced and reported as a replica.
    """
    return {f.member.key: (f.node, f.role) for f in final_members(snapshot, plan)}


def _alive(finals: Iterable[FinalMember], nodes: dict[str, Node]) -> list[tuple[FinalMember, Node]]:
    """Members on a node that exists: the only ones that have a host, rack and zone."""
    return [(f, nodes[f.node]) for f in finals if f.node is not None and f.node in nodes]


# --------------------------------------------------------------------------- fits


def tolerates(toleration: Toleration, taint: Taint) -> bool:
    """Kubernetes ``Toleration.ToleratesTaint``: effect, then key, then operator."""
    if toleration.effect and toleration.effect != taint.effect:
        return False
    if toleration.key and toleration.key != taint.key:
        return False
    operator = toleration.operator or "Equal"
    if operator == "Exists":
        return True
    if operator == "Equal":
        return (toleration.value or "") == (taint.value or "")
    return False


def untolerated_taints(pod: Pod, node: Node) -> list[Taint]:
    """The node's scheduling taints that none of the pod's tolerations tolerates."""
    return [
        taint
        for taint in node.taints
        if taint.effect in SCHEDULING_EFFECTS
        and not any(tolerates(t, taint) for t in pod.tolerations)
    ]


def expression_matches(requirement: SelectorRequirement, labels: dict[str, str]) -> bool:
    """One matchExpressions entry against node labels."""
    op, key, values = requirement.operator, requirement.key, requirement.values
    if op == "In":
        return key in labels and labels[key] in values
    if op == "NotIn":
        return key not in labels or labels[key] not in values
    if op == "Exists":
        return key in labels
    if op == "DoesNotExist":
        return key not in labels
    if op in ("Gt", "Lt"):
        if key not in labels or len(values) != 1:
            return False
        label, bound = labels[key].strip(), values[0].strip()
        if not _INTEGER.match(label) or not _INTEGER.match(bound):
            return False
        return int(label) > int(bound) if op == "Gt" else int(label) < int(bound)
    return False


def field_matches(requirement: SelectorRequirement, node: Node) -> bool:
    """One matchFields entry: Kubernetes only supports ``metadata.name`` with In / NotIn."""
    if requirement.key != "metadata.name":
        return False
    if requirement.operator == "In":
        return node.name in requirement.values
    if requirement.operator == "NotIn":
        return node.name not in requirement.values
    return False


def affinity_matches(pod: Pod, node: Node) -> bool:
    """Required node affinity: terms ORed, requirements within a term ANDed, empty term matches nothing."""
    if not pod.affinity_terms:
        return True
    for term in pod.affinity_terms:
        if not term.match_expressions and not term.match_fields:
            continue
        if all(expression_matches(r, node.labels) for r in term.match_expressions) and all(
            field_matches(r, node) for r in term.match_fields
        ):
            return True
    return False


def _taint_text(taint: Taint) -> str:
    value = f"={taint.value}" if taint.value else ""
    return f"{taint.key}{value}:{taint.effect}"


def fit_problems(pod: Pod, node: Node | None, node_name: str) -> list[str]:
    """Why ``pod`` may not be sent to the node, in words; empty when it may (capacity aside)."""
    if node is None:
        return [f"node {node_name} is not in the snapshot"]
    problems: list[str] = []
    if not node.ready:
        problems.append(f"node {node_name} is not Ready")
    if node.unschedulable:
        problems.append(f"node {node_name} is unschedulable")
    if node.zone is None:
        problems.append(f"node {node_name} has no zone label")
    for taint in untolerated_taints(pod, node):
        problems.append(f"taint {_taint_text(taint)} is not tolerated")
    wrong = sorted(k for k, v in pod.node_selector.items() if node.labels.get(k) != v)
    if wrong:
        problems.append(
            "nodeSelector " + ", ".join(f"{k}={pod.node_selector[k]}" for k in wrong) + " not met"
        )
    if not affinity_matches(pod, node):
        problems.append("required node affinity not met")
    return problems


def _check_fits(snapshot: Snapshot, finals: list[FinalMember]) -> list[Violation]:
    nodes = snapshot.node_by_name
    violations = []
    for f in finals:
        if not f.arrives or f.node is None:
            continue
        problems = fit_problems(f.member.pod, nodes.get(f.node), f.node)
        if problems:
            violations.append(
                _violation(
                    "fits",
                    "hard",
                    [f.member.key],
                    [f.node],
                    f"{f.member.key} cannot go to {f.node}: {'; '.join(problems)}",
                )
            )
    return violations


def _check_capacity(snapshot: Snapshot, finals: list[FinalMember]) -> list[Violation]:
    """Room on every node that receives a member: everything bound there must fit allocatable."""
    nodes = snapshot.node_by_name
    arriving: dict[str, list[str]] = defaultdict(list)
    for f in finals:
        if f.arrives and f.node is not None and f.node in nodes:
            arriving[f.node].append(f.member.key)
    if not arriving:
        return []
    used: dict[str, Resources] = defaultdict(Resources)
    for pod in snapshot.other_pods:
        if pod.node_name in arriving:
            used[pod.node_name] = used[pod.node_name] + pod.requests
    for f in finals:
        if f.node in arriving:
            used[f.node] = used[f.node] + f.member.pod.requests
    violations = []
    for name in sorted(arriving):
        room, need = nodes[name].allocatable, used[name]
        over = [
            f"{what} {have} > {limit}"
            for what, have, limit in (
                ("cpu(m)", need.cpu, room.cpu),
                ("memory(bytes)", need.memory, room.memory),
                ("pods", need.pods, room.pods),
            )
            if have > limit
        ]
        if over:
            violations.append(
                _violation(
                    "fits",
                    "hard",
                    sorted(arriving[name]),
                    [name],
                    f"node {name} is over capacity: {', '.join(over)}",
                )
            )
    return violations


# --------------------------------------------------------------------------- placement rules


def _violation(
    rule: str, severity: Severity, pods: list[str], nodes: list[str], message: str
) -> Violation:
    return Violation(rule=rule, severity=severity, pods=pods, nodes=nodes, message=message)


def _check_shard_spread(snapshot: Snapshot, finals: list[FinalMember]) -> list[Violation]:
    """Two members of one shard on one host (Node.host, not the node name)."""
    groups: dict[tuple[str, str], list[tuple[FinalMember, Node]]] = defaultdict(list)
    for f, node in _alive(finals, snapshot.node_by_name):
        groups[(f.member.shard_key, node.host)].append((f, node))
    violations = []
    for (shard, host), here in sorted(groups.items()):
        if len(here) > 1:
            violations.append(
                _violation(
                    "shard-spread",
                    "hard",
                    sorted(f.member.key for f, _ in here),
                    sorted({n.name for _, n in here}),
                    f"shard {shard} has {len(here)} members on host {host}",
                )
            )
    return violations


def _check_master_exclusivity(
    snapshot: Snapshot, policy: Policy, finals: list[FinalMember]
) -> list[Violation]:
    """Masters per node, counted over every managed Redis cluster."""
    limit = policy.rules.max_masters_per_node
    masters: dict[str, list[str]] = defaultdict(list)
    for f, node in _alive(finals, snapshot.node_by_name):
        if f.role is Role.MASTER:
            masters[node.name].append(f.member.key)
    return [
        _violation(
            "master-exclusivity",
            "hard",
            sorted(keys),
            [name],
            f"node {name} hosts {len(keys)} masters (at most {limit} allowed)",
        )
        for name, keys in sorted(masters.items())
        if len(keys) > limit
    ]


def _shard_master(members: list[FinalMember]) -> FinalMember | None:
    """The shard's one placed master, or None when it has none or several."""
    masters = [f for f in members if f.node is not None and f.role is Role.MASTER]
    return masters[0] if len(masters) == 1 else None


def _by_shard(finals: list[FinalMember]) -> dict[str, list[FinalMember]]:
    grouped: dict[str, list[FinalMember]] = defaultdict(list)
    for f in finals:
        grouped[f.member.shard_key].append(f)
    return grouped


def _check_shard_roles(finals: list[FinalMember]) -> list[Violation]:
    """A shard with placed members needs exactly one master among them."""
    violations = []
    for shard, members in sorted(_by_shard(finals).items()):
        placed = [f for f in members if f.node is not None]
        masters = [f for f in placed if f.role is Role.MASTER]
        if placed and len(masters) != 1:
            violations.append(
                _violation(
                    "shard-roles",
                    "hard",
                    sorted(f.member.key for f in placed),
                    sorted({f.node for f in placed if f.node is not None}),
                    f"shard {shard} has {len(masters)} masters among its {len(placed)} placed members",
                )
            )
    return violations


def _separation_pairs(
    snapshot: Snapshot, finals: list[FinalMember], level: Level
) -> list[tuple[FinalMember, FinalMember]]:
    """(replica, its master) pairs that share a domain at ``level``; both must be alive."""
    nodes = snapshot.node_by_name
    pairs = []
    for members in _by_shard(finals).values():
        master = _shard_master(members)
        if master is None or master.node not in nodes:
            continue
        master_domain = nodes[master.node].domain(level)
        for f in members:
            same = f.node in nodes and nodes[f.node].domain(level) == master_domain
            if f.role is Role.REPLICA and same:
                pairs.append((f, master))
    return pairs


def _check_replica_separation(
    snapshot: Snapshot, policy: Policy, finals: list[FinalMember]
) -> list[Violation]:
    """Replica and own master in one rack / zone: hard when required, soft when preferred."""
    violations = []
    for level in ("rack", "zone"):
        strength = policy.rules.replica_separation.strength(level)
        if strength == "ignore":
            continue
        severity: Severity = "hard" if strength == "required" else "soft"
        nodes = snapshot.node_by_name
        for replica, master in sorted(
            _separation_pairs(snapshot, finals, level), key=lambda p: p[0].member.key
        ):
            assert replica.node is not None and master.node is not None
            domain = nodes[replica.node].domain(level)
            violations.append(
                _violation(
                    "replica-separation",
                    severity,
                    [replica.member.key, master.member.key],
                    sorted({replica.node, master.node}),
                    f"replica {replica.member.key} shares {level} {domain} with its master "
                    f"{master.member.key} (shard {replica.member.shard_key})",
                )
            )
    return violations


# --------------------------------------------------------------------------- domain failures


@dataclass
class _Losses:
    """What losing one domain takes down."""

    domain: str | None
    members: list[tuple[FinalMember, Node]]
    shards_lost: list[str]
    """Shards with no alive member left."""
    clusters_lost: list[str]
    """Clusters left with at most half of their masters alive."""
    masters_in: Counter[str]
    """Per cluster: its alive masters in the domain."""
    masters_total: Counter[str]
    """Per cluster: all its masters, placed or not."""
    masters_alive: Counter[str]
    """Per cluster: its alive masters anywhere."""

    def master_share(self) -> dict[str, float]:
        """Per cluster with masters here: the share of its masters this failure takes down."""
        return {k: n / self.masters_total[k] for k, n in self.masters_in.items()}


def _domain_losses(snapshot: Snapshot, finals: list[FinalMember], level: Level) -> list[_Losses]:
    """For every domain at ``level`` holding an alive member: what its failure takes down.

    Unplaced members and members on vanished nodes are not alive anywhere, so a shard or cluster
    already short of them fails in every domain's loss. Counting is per domain, never domains x
    shards: a shard can only be lost by a domain that holds it, unless it is already dead.
    """
    alive = _alive(finals, snapshot.node_by_name)
    shards = {f.member.shard_key for f in finals}
    alive_per_shard = Counter(f.member.shard_key for f, _ in alive)
    masters_total = Counter(f.member.cluster for f in finals if f.role is Role.MASTER)
    masters_alive = Counter(f.member.cluster for f, _ in alive if f.role is Role.MASTER)
    dead_shards = sorted(s for s in shards if alive_per_shard[s] == 0)

    def cluster_lost(cluster: str, masters_in_domain: int) -> bool:
        left = masters_alive[cluster] - masters_in_domain
        return 2 * left <= masters_total[cluster]

    weak_clusters = {k for k in masters_total if cluster_lost(k, 0)}

    by_domain: dict[str | None, list[tuple[FinalMember, Node]]] = defaultdict(list)
    for f, node in alive:
        by_domain[node.domain(level)].append((f, node))

    losses = []
    for domain, here in sorted(by_domain.items(), key=lambda kv: (kv[0] is None, kv[0] or "")):
        in_domain = Counter(f.member.shard_key for f, _ in here)
        masters_in = Counter(f.member.cluster for f, _ in here if f.role is Role.MASTER)
        lost = set(dead_shards) | {s for s, n in in_domain.items() if n == alive_per_shard[s]}
        clusters = weak_clusters | {k for k, n in masters_in.items() if cluster_lost(k, n)}
        losses.append(
            _Losses(
                domain=domain,
                members=here,
                shards_lost=sorted(lost),
                clusters_lost=sorted(clusters),
                masters_in=masters_in,
                masters_total=masters_total,
                masters_alive=masters_alive,
            )
        )
    return losses


def _check_survive(
    snapshot: Snapshot, policy: Policy, finals: list[FinalMember]
) -> list[Violation]:
    """Losing any one domain at the survive level keeps every shard and a master majority."""
    level = policy.rules.survive
    if level == "none":
        return []
    violations = []
    for loss in _domain_losses(snapshot, finals, level):
        if not loss.shards_lost and not loss.clusters_lost:
            continue
        failing_shards, failing_clusters = set(loss.shards_lost), set(loss.clusters_lost)
        pods = sorted(
            f.member.key
            for f, _ in loss.members
            if f.member.shard_key in failing_shards or f.member.cluster in failing_clusters
        )
        parts = []
        if loss.shards_lost:
            parts.append(f"shard(s) {', '.join(loss.shards_lost)} with no member alive")
        for cluster in loss.clusters_lost:
            left = loss.masters_alive[cluster] - loss.masters_in[cluster]
            parts.append(
                f"cluster {cluster} with {left} of {loss.masters_total[cluster]} masters alive "
                "(needs a strict majority)"
            )
        violations.append(
            _violation(
                "survive",
                "hard",
                pods,
                sorted({n.name for _, n in loss.members}),
                f"losing {level} {loss.domain} leaves {'; '.join(parts)}",
            )
        )
    return violations


def worst_domain_loss(snapshot: Snapshot, policy: Policy, plan: Plan) -> list[DomainLoss]:
    """Per level (host, rack, zone): the one failure that takes the largest share of some cluster's masters.

    Ties go to the domain that leaves more shards with no member alive, then to the first name.
    A level with no alive member reports domain None and ratio 0.
    """
    finals = final_members(snapshot, plan)
    result = []
    for level in LEVELS:
        best: tuple[float, int, DomainLoss] | None = None
        for loss in _domain_losses(snapshot, finals, level):
            ratio, cluster = 0.0, None
            for name, share in sorted(loss.master_share().items()):
                if share > ratio:
                    ratio, cluster = share, name
            candidate = DomainLoss(
                level=level,
                domain=loss.domain,
                master_loss_ratio=ratio,
                cluster=cluster,
                shards_lost=len(loss.shards_lost),
            )
            if best is None or (ratio, len(loss.shards_lost)) > best[:2]:
                best = (ratio, len(loss.shards_lost), candidate)
        result.append(
            best[2] if best else DomainLoss(level=level, domain=None, master_loss_ratio=0.0)
        )
    return result


# --------------------------------------------------------------------------- the whole check


def check_plan(snapshot: Snapshot, policy: Policy, plan: Plan) -> list[Violation]:
    """Every rule broken by the plan's final placement, hard and soft."""
    finals = final_members(snapshot, plan)
    return [
        *_check_fits(snapshot, finals),
        *_check_capacity(snapshot, finals),
        *_check_shard_spread(snapshot, finals),
        *_check_master_exclusivity(snapshot, policy, finals),
        *_check_shard_roles(finals),
        *_check_replica_separation(snapshot, policy, finals),
        *_check_survive(snapshot, policy, finals),
    ]


def keep_plan(snapshot: Snapshot) -> Plan:
    """The plan that changes nothing: running members stay, pending members stay unplaced."""
    assignments = []
    unplaced = []
    for m in snapshot.members:
        role = (m.role or Role.REPLICA).value
        if m.pod.pending:
            assignments.append(
                Assignment(
                    pod=m.key,
                    node=None,
                    role=role,
                    cluster=m.cluster,
                    shard=m.shard,
                    action="place",
                )
            )
            unplaced.append(Unplaced(pod=m.key, reason="pending"))
        else:
            assignments.append(
                Assignment(
                    pod=m.key,
                    node=m.pod.node_name,
                    role=role,
                    cluster=m.cluster,
                    shard=m.shard,
                    action="keep",
                )
            )
    return Plan(status="FEASIBLE", assignments=assignments, unplaced=unplaced)


def audit(snapshot: Snapshot, policy: Policy) -> list[Violation]:
    """The violations of the placement as it runs now, plus members at risk on a bad node."""
    nodes = snapshot.node_by_name
    at_risk = []
    for m in snapshot.running:
        name = m.pod.node_name
        assert name is not None
        node = nodes.get(name)
        if node is None:
            problem = "is not in the snapshot"
        elif not node.ready:
            problem = "is not Ready"
        elif node.unschedulable:
            problem = "is unschedulable"
        else:
            continue
        at_risk.append(
            _violation("fits", "soft", [m.key], [name], f"{m.key} runs on a node that {problem}")
        )
    return [*at_risk, *check_plan(snapshot, policy, keep_plan(snapshot))]


# --------------------------------------------------------------------------- objective


def evaluate_objective(snapshot: Snapshot, policy: Policy, plan: Plan) -> dict[str, float]:
    """The weighted objective terms of the final placement (objective.md), and their total."""
    weights = policy.weights
    nodes = snapshot.node_by_name
    finals = final_members(snapshot, plan)
    alive = _alive(finals, nodes)
    terms: dict[str, float] = {}

    for level in ("rack", "zone"):
        if policy.rules.replica_separation.strength(level) == "preferred":
            pairs = len(_separation_pairs(snapshot, finals, level))
            terms[level] = float(weights.separation(level) * pairs)
        else:
            terms[level] = 0.0

    per_cluster_zone: Counter[tuple[str, str | None]] = Counter()
    per_node: Counter[str] = Counter()
    for f, node in alive:
        if f.role is Role.MASTER:
            per_cluster_zone[(f.member.cluster, node.zone)] += 1
            per_node[node.name] += 1
    worst_zone: dict[str, int] = {}
    for (cluster, _), count in per_cluster_zone.items():
        worst_zone[cluster] = max(worst_zone.get(cluster, 0), count)
    stacked = sum(max(0, count - 1) for count in per_node.values())
    terms["masterBalance"] = float(weights.master_balance * (sum(worst_zone.values()) + stacked))

    memory: Counter[str] = Counter()
    for f, node in alive:
        memory[node.name] += f.member.pod.requests.memory
    hosting = set(memory)
    for pod in snapshot.other_pods:
        if pod.node_name in hosting:
            memory[pod.node_name] += pod.requests.memory
    max_util = max(
        (
            100 * memory[name] // nodes[name].allocatable.memory
            for name in hosting
            if nodes[name].allocatable.memory > 0
        ),
        default=0,
    )
    terms["loadBalance"] = float(weights.load_balance * max_util)

    moves = sum(1 for a in plan.assignments if a.action == "move")
    terms["move"] = float(weights.move * moves)
    terms["failover"] = float(weights.failover * len(plan.failovers))
    terms["total"] = sum(terms.values())
    return terms
