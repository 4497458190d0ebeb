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
from typing import NamedTuple

from models.cluster import (
    FreeVolume,
    Member,
    Node,
    Pod,
    Role,
    SelectorRequirement,
    SelectorTerm,
    Taint,
    Toleration,
)
from models.plan import (
    Assignment,
    DomainLoss,
    DomainTakes,
    Plan,
    Severity,
    Unplaced,
    Violation,
)
from models.policy import LEVELS, Level, Policy
from models.snapshot import Snapshot

SCHEDULING_EFFECTS = frozenset({"NoSchedule", "NoExecute"})
"""Taint effects that keep a pod off a node (PreferNoSchedule only discourages)."""

_INTEGER = re.compile(r"^[+-]?\d+$")
HOSTNAME_LABEL = "kubernetes.io/hostname"


# --------------------------------------------------------------------------- final placement


class FinalMember(NamedTuple):
    """One member after the plan: where it ends, as what, and whether the plan sends it there.

    A named tuple rather than a dataclass: a plan over a large cluster makes one per member, and
    every check reads them, so creation cost counts.
    """

    member: Member
    node: str | None
    role: Role
    action: str
    arrives: bool
    """The plan places or moves it onto ``node``: only such members are held to ``fits``."""
    key: str
    shard: str
    """The member's ``cluster/shard`` key."""
    cluster: str


_ROLES = {role.value: role for role in Role}


def final_members(snapshot: Snapshot, plan: Plan) -> list[FinalMember]:
    """Every managed member's final state; members the plan omits stay as they are."""
    by_pod: dict[str, Assignment] = {a.pod: a for a in plan.assignments}
    unplaced = {u.pod for u in plan.unplaced}
    finals: list[FinalMember] = []
    for member in snapshot.members:
        current = member.pod.node_name
        key = member.key
        assignment = by_pod.get(key)
        if assignment is None:
            node, role, action = current, member.role or Role.REPLICA, "keep"
        else:
            node, role, action = assignment.node, _ROLES[assignment.role], assignment.action
        if unplaced and key in unplaced:
            node = None
        # A "keep" that changes node is a move in all but name: check it like one.
        arrives = node is not None and (action in ("place", "move") or node != current)
        finals.append(
            FinalMember(member, node, role, action, arrives, key, member.shard_key, member.cluster)
        )
    return finals


def final_placement(snapshot: Snapshot, plan: Plan) -> dict[str, tuple[str | None, Role]]:
    """Pod key -> (final node or None, final role) for every managed member.

    Members missing from the plan keep their current node and role; a pending member without a
    role that the plan leaves out is unplaced and reported as a replica.
    """
    return {f.member.key: (f.node, f.role) for f in final_members(snapshot, plan)}


class _View:
    """The final placement and the indexes every check reads, built once per judged plan.

    check_plan, evaluate_objective and worst_domain_loss each need the same walk over every
    member; on a large cluster that walk is most of their cost, so ``assess`` shares one.
    """

    def __init__(self, snapshot: Snapshot, plan: Plan) -> None:
        self.snapshot = snapshot
        self.plan = plan
        self.finals = final_members(snapshot, plan)
        # One walk for the indexes most checks share: alive members, overall and per shard.
        nodes = snapshot.node_by_name
        self.alive: list[tuple[FinalMember, Node]] = []
        self.shard_alive: dict[str, list[tuple[FinalMember, Node]]] = defaultdict(list)
        by_shard: dict[str, list[FinalMember]] = defaultdict(list)
        for f in self.finals:
            by_shard[f.shard].append(f)
            node = nodes.get(f.node) if f.node is not None else None
            if node is not None:
                self.alive.append((f, node))
                self.shard_alive[f.shard].append((f, node))
        self._by_shard: dict[str, list[FinalMember]] | None = by_shard
        self._pairs: dict[str, list[tuple[FinalMember, FinalMember]]] = {}
        self._masters: list[tuple[FinalMember, Node, list[FinalMember]]] | None = None

    @property
    def by_shard(self) -> dict[str, list[FinalMember]]:
        if self._by_shard is None:
            self._by_shard = _by_shard(self.finals)
        return self._by_shard

    @property
    def masters(self) -> list[tuple[FinalMember, Node, list[FinalMember]]]:
        """Per shard with exactly one placed master on a node that exists: it, its node, the shard."""
        if self._masters is None:
            nodes = self.snapshot.node_by_name
            self._masters = []
            for members in self.by_shard.values():
                master = _shard_master(members)
                node = nodes.get(master.node) if master is not None and master.node else None
                if master is not None and node is not None:
                    self._masters.append((master, node, members))
        return self._masters

    def pairs(self, level: Level) -> list[tuple[FinalMember, FinalMember]]:
        if level not in self._pairs:
            self._pairs[level] = _separation_pairs(self.snapshot, self.masters, level)
        return self._pairs[level]


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
    problems.extend(volume_problems(pod, node))
    return problems


def terms_match(terms: tuple[SelectorTerm, ...], node: Node) -> bool:
    """A PV's node affinity or a class's allowed topologies: ORed terms, none means any node."""
    if not terms:
        return True
    return any(
        (term.match_expressions or term.match_fields)
        and all(expression_matches(r, node.labels) for r in term.match_expressions)
        and all(field_matches(r, node) for r in term.match_fields)
        for term in terms
    )


_PV_INDEXES: dict[int, tuple[object, dict[str, list[str]], list[FreeVolume]]] = {}


def usable_volumes(volumes: tuple[FreeVolume, ...], node: Node) -> list[str]:
    """Names of the PVs whose node affinity admits the node. PVs pinned by hostname alone are
    looked up by the node's hostname label; the rest are matched one by one."""
    cached = _PV_INDEXES.get(id(volumes))
    if cached is None or cached[0] is not volumes:
        if len(_PV_INDEXES) > 256:
            _PV_INDEXES.clear()
        by_host: dict[str, list[str]] = defaultdict(list)
        rest: list[FreeVolume] = []
        for v in volumes:
            exprs = [r for t in v.terms for r in t.match_expressions]
            single = len(v.terms) == 1 and not v.terms[0].match_fields and len(exprs) == 1
            if single and exprs[0].key == HOSTNAME_LABEL and exprs[0].operator == "In":
                for host in exprs[0].values:
                    by_host[host].append(v.name)
            else:
                rest.append(v)
        cached = _PV_INDEXES[id(volumes)] = (volumes, dict(by_host), rest)
    _, by_host_index, others = cached
    named = by_host_index.get(node.labels.get(HOSTNAME_LABEL, ""), [])
    return named + [v.name for v in others if terms_match(v.terms, node)]


def volume_problems(pod: Pod, node: Node) -> list[str]:
    """Why the pod's claims keep it off the node: a bound claim's PV affinity, a local claim
    without a matching free PV there, a class's allowed topologies, a claim that holds it."""
    problems = []
    for need in pod.volumes:
        rule = need.rule
        if rule.kind == "held":
            problems.append(rule.reason)
        elif rule.kind == "bound" and not terms_match(rule.terms, node):
            problems.append(f"claim {need.claim}: pv {need.volume} is not reachable from the node")
        elif rule.kind == "zonal" and not terms_match(rule.terms, node):
            problems.append(f"claim {need.claim}: outside its storage class's allowedTopologies")
        elif rule.kind == "local" and not usable_volumes(rule.volumes, node):
            problems.append(f"claim {need.claim}: no matching free pv on the node")
    return problems


def _check_volume_matching(snapshot: Snapshot, finals: list[FinalMember]) -> list[Violation]:
    """Each unbound local claim on a node needs its own free PV there: a matching of claims to
    the node's free PVs, checked exactly (augmenting paths) on every node that receives one."""
    nodes = snapshot.node_by_name
    receiving = {
        f.node
        for f in finals
        if f.arrives
        and f.node in nodes
        and any(n.rule.kind == "local" for n in f.member.pod.volumes)
    }
    if not receiving:
        return []
    claims: dict[str, list[tuple[str, list[str]]]] = defaultdict(list)
    pods_on: dict[str, list[str]] = defaultdict(list)
    on_node = [(f.node, f.member.pod) for f in finals] + [
        (p.node_name, p) for p in snapshot.other_pods
    ]
    for name, pod in on_node:
        if name not in receiving:
            continue
        node = nodes[name]
        for need in pod.volumes:
            if need.rule.kind == "local":
                usable = usable_volumes(need.rule.volumes, node)
                claims[name].append((need.claim, usable))
                pods_on[name].append(pod.key)
    violations = []
    for name in sorted(receiving):
        matched = _matching(claims[name])
        if matched < len(claims[name]):
            violations.append(
                _violation(
                    "fits",
                    "hard",
                    sorted(set(pods_on[name])),
                    [name],
                    f"node {name} has free pvs for {matched} of the {len(claims[name])} unbound "
                    "local claims of its pods",
                )
            )
    return violations


def _matching(claims: list[tuple[str, list[str]]]) -> int:
    """Size of a largest matching of claims to distinct PVs (Kuhn's augmenting paths)."""
    owner: dict[str, int] = {}

    def augment(i: int, seen: set[str]) -> bool:
        for volume in claims[i][1]:
            if volume in seen:
                continue
            seen.add(volume)
            if volume not in owner or augment(owner[volume], seen):
                owner[volume] = i
                return True
        return False

    return sum(1 for i in range(len(claims)) if augment(i, set()))


def _check_fits(snapshot: Snapshot, finals: list[FinalMember]) -> list[Violation]:
    nodes = snapshot.node_by_name
    violations = []
    for f in finals:
        if not f.arrives or f.node is None:
            continue
        violation = fit_violation(f, nodes)
        if violation is not None:
            violations.append(violation)
    return violations


def fit_violation(f: FinalMember, nodes: dict[str, Node]) -> Violation | None:
    """One arriving member's fit on its node (capacity aside)."""
    assert f.node is not None
    problems = fit_problems(f.member.pod, nodes.get(f.node), f.node)
    if not problems:
        return None
    return _violation(
        "fits",
        "hard",
        [f.member.key],
        [f.node],
        f"{f.member.key} cannot go to {f.node}: {'; '.join(problems)}",
    )


def _check_capacity(snapshot: Snapshot, finals: list[FinalMember]) -> list[Violation]:
    """Room on every node that receives a member: everything bound there must fit allocatable."""
    nodes = snapshot.node_by_name
    arriving: dict[str, list[str]] = defaultdict(list)
    for f in finals:
        if f.arrives and f.node is not None and f.node in nodes:
            arriving[f.node].append(f.member.key)
    if not arriving:
        return []
    # Plain integers: summing Resources models over a large cluster costs more than the check.
    used: dict[str, list[int]] = {name: [0, 0, 0] for name in arriving}
    for pod in snapshot.other_pods:
        total = used.get(pod.node_name or "")
        if total is not None:
            r = pod.requests
            total[0] += r.cpu
            total[1] += r.memory
            total[2] += r.pods
    for f in finals:
        total = used.get(f.node or "")
        if total is not None:
            r = f.member.pod.requests
            total[0] += r.cpu
            total[1] += r.memory
            total[2] += r.pods
    violations = []
    for name in sorted(arriving):
        violation = capacity_violation(nodes[name], used[name], arriving[name])
        if violation is not None:
            violations.append(violation)
    return violations


def capacity_violation(node: Node, need: list[int], arriving: list[str]) -> Violation | None:
    """A node receiving members, with ``need`` (cpu, memory, pods) bound there in all."""
    name, room = node.name, node.allocatable
    over = [
        f"{what} {have} > {limit}"
        for what, have, limit in (
            ("cpu(m)", need[0], room.cpu),
            ("memory(bytes)", need[1], room.memory),
            ("pods", need[2], room.pods),
        )
        if have > limit
    ]
    if not over:
        return None
    return _violation(
        "fits", "hard", sorted(arriving), [name], f"node {name} is over capacity: {', '.join(over)}"
    )


# --------------------------------------------------------------------------- placement rules


def _violation(
    rule: str, severity: Severity, pods: list[str], nodes: list[str], message: str
) -> Violation:
    # Built without validation: a large running cluster has thousands, from checked values.
    return Violation.model_construct(
        rule=rule, severity=severity, pods=pods, nodes=nodes, message=message
    )


def _check_shard_spread(view: _View) -> list[Violation]:
    """Two members of one shard on one host (Node.host, not the node name)."""
    return [
        v
        for shard in sorted(view.shard_alive)
        for v in shard_spread(shard, view.shard_alive[shard])
    ]


def shard_spread(shard: str, here: list[tuple[FinalMember, Node]]) -> list[Violation]:
    """One shard's alive members sharing a host, by host name."""
    if len(here) < 2 or len({node.host for _, node in here}) == len(here):
        return []
    groups: dict[str, list[tuple[FinalMember, Node]]] = defaultdict(list)
    for f, node in here:
        groups[node.host].append((f, node))
    return [
        _violation(
            "shard-spread",
            "hard",
            sorted(f.member.key for f, _ in on_host),
            sorted({n.name for _, n in on_host}),
            f"shard {shard} has {len(on_host)} members on host {host}",
        )
        for host, on_host in sorted(groups.items())
        if len(on_host) > 1
    ]


def _check_master_exclusivity(policy: Policy, view: _View) -> list[Violation]:
    """Masters per node, counted over every managed Redis cluster."""
    limit = policy.rules.max_masters_per_node
    masters: dict[str, list[str]] = defaultdict(list)
    for f, node in view.alive:
        if f.role is Role.MASTER:
            masters[node.name].append(f.member.key)
    return [
        exclusivity_violation(name, keys, limit)
        for name, keys in sorted(masters.items())
        if len(keys) > limit
    ]


def exclusivity_violation(name: str, keys: list[str], limit: int) -> Violation:
    """A node hosting more masters (``keys``) than ``limit``."""
    return _violation(
        "master-exclusivity",
        "hard",
        sorted(keys),
        [name],
        f"node {name} hosts {len(keys)} masters (at most {limit} allowed)",
    )


def _shard_master(members: list[FinalMember]) -> FinalMember | None:
    """The shard's one placed master, or None when it has none or several."""
    masters = [f for f in members if f.node is not None and f.role is Role.MASTER]
    return masters[0] if len(masters) == 1 else None


def _by_shard(finals: list[FinalMember]) -> dict[str, list[FinalMember]]:
    grouped: dict[str, list[FinalMember]] = defaultdict(list)
    for f in finals:
        grouped[f.shard].append(f)
    return grouped


def _check_shard_roles(view: _View) -> list[Violation]:
    """A shard with placed members needs exactly one master among them."""
    by_shard = view.by_shard
    checked = (shard_roles(shard, by_shard[shard]) for shard in sorted(by_shard))
    return [v for v in checked if v is not None]


def shard_roles(shard: str, members: list[FinalMember]) -> Violation | None:
    """One shard's placed members and how many of them are masters (one is right)."""
    placed = [f for f in members if f.node is not None]
    masters = sum(1 for f in placed if f.role is Role.MASTER)
    if not placed or masters == 1:
        return None
    return _violation(
        "shard-roles",
        "hard",
        sorted(f.member.key for f in placed),
        sorted({f.node for f in placed if f.node is not None}),
        f"shard {shard} has {masters} masters among its {len(placed)} placed members",
    )


def _separation_pairs(
    snapshot: Snapshot, masters: list[tuple[FinalMember, Node, list[FinalMember]]], level: Level
) -> list[tuple[FinalMember, FinalMember]]:
    """(replica, its master) pairs that share a domain at ``level``; both must be alive."""
    nodes = snapshot.node_by_name
    pairs = []
    for master, master_node, members in masters:
        pairs.extend(shard_pairs(nodes, master, master_node, members, level))
    return pairs


def shard_pairs(
    nodes: dict[str, Node],
    master: FinalMember,
    master_node: Node,
    members: list[FinalMember],
    level: Level,
) -> list[tuple[FinalMember, FinalMember]]:
    """One shard's (replica, master) pairs sharing a domain at ``level``."""
    master_domain = master_node.domain(level)
    if master_domain is None:
        return []  # no zone label: nothing is known to share its zone
    pairs = []
    for f in members:
        if f.role is not Role.REPLICA or f.node is None:
            continue
        node = nodes.get(f.node)
        if node is not None and node.domain(level) == master_domain:
            pairs.append((f, master))
    return pairs


def _check_replica_separation(policy: Policy, view: _View) -> list[Violation]:
    """Replica and own master in one rack / zone: hard when required, soft when preferred."""
    violations = []
    nodes = view.snapshot.node_by_name
    for level in ("rack", "zone"):
        strength = policy.rules.replica_separation.strength(level)
        if strength == "ignore":
            continue
        severity: Severity = "hard" if strength == "required" else "soft"
        for replica, master in sorted(view.pairs(level), key=lambda p: p[0].member.key):
            violations.append(separation_violation(nodes, level, severity, replica, master))
    return violations


def separation_violation(
    nodes: dict[str, Node],
    level: Level,
    severity: Severity,
    replica: FinalMember,
    master: FinalMember,
) -> Violation:
    """A replica sharing its master's domain at ``level``."""
    assert replica.node is not None and master.node is not None
    domain = nodes[replica.node].domain(level)
    return _violation(
        "replica-separation",
        severity,
        [replica.member.key, master.member.key],
        sorted({replica.node, master.node}),
        f"replica {replica.member.key} shares {level} {domain} with its master "
        f"{master.member.key} (shard {replica.member.shard_key})",
    )


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


@dataclass
class _Census:
    """Counts over the whole final placement that every domain's loss is measured against."""

    alive_per_shard: dict[str, int]
    masters_total: Counter[str]
    masters_alive: Counter[str]
    dead_shards: list[str]
    """Shards with no alive member at all: lost whichever domain fails."""


def _exists(f: FinalMember) -> bool:
    """Runs now, or is placed by the plan: a pending member left unplaced is not there to lose."""
    return f.node is not None or not f.member.pod.pending


def _census(view: _View) -> _Census:
    alive_per_shard = {shard: len(here) for shard, here in view.shard_alive.items()}
    masters_alive: Counter[str] = Counter(f.cluster for f, _ in view.alive if f.role is Role.MASTER)
    masters_total: Counter[str] = Counter(
        f.cluster for f in view.finals if f.role is Role.MASTER and _exists(f)
    )
    dead = sorted(
        s
        for s, members in view.by_shard.items()
        if s not in alive_per_shard and any(_exists(f) for f in members)
    )
    return _Census(alive_per_shard, masters_total, masters_alive, dead)


def _short(census: _Census) -> dict[str, tuple[int, int]]:
    """Clusters at or under half their masters alive whatever fails: (alive, in all)."""
    alive = census.masters_alive
    return {k: (alive[k], n) for k, n in census.masters_total.items() if 2 * alive[k] <= n}


def _domain_losses(view: _View, level: Level, census: _Census | None = None) -> list[_Losses]:
    """For every domain at ``level`` holding an alive member: what its failure takes down.

    Unplaced members and members on vanished nodes are not alive anywhere, so a shard or cluster
    already short of them fails in every domain's loss. Counting is per domain, never domains x
    shards: a shard can only be lost by a domain that holds it, unless it is already dead.
    """
    census = _census(view) if census is None else census
    masters_total, masters_alive = census.masters_total, census.masters_alive

    def cluster_lost(cluster: str, masters_in_domain: int) -> bool:
        left = masters_alive[cluster] - masters_in_domain
        return 2 * left <= masters_total[cluster]

    weak_clusters = set(_short(census))

    by_domain: dict[str | None, list[tuple[FinalMember, Node]]] = defaultdict(list)
    for f, node in view.alive:
        by_domain[node.domain(level)].append((f, node))

    losses = []
    for domain, here in sorted(by_domain.items(), key=lambda kv: (kv[0] is None, kv[0] or "")):
        in_domain = Counter(f.shard for f, _ in here)
        masters_in = Counter(f.cluster for f, _ in here if f.role is Role.MASTER)
        lost = set(census.dead_shards) | {
            s for s, n in in_domain.items() if n == census.alive_per_shard[s]
        }
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


def majority_shortfall(snapshot: Snapshot, plan: Plan, level: Level) -> dict[str, int]:
    """Per Redis cluster with a master: how many masters short of a strict majority the worst
    single loss of a domain at ``level`` leaves it (0: it keeps a majority through every one).
    Masters on no node of the snapshot are lost whichever domain fails."""
    view = _View(snapshot, plan)
    census = _census(view)
    total, alive = census.masters_total, census.masters_alive
    worst = {k: max(0, n // 2 + 1 - alive[k]) for k, n in total.items()}
    inside: Counter[tuple[str, str | None]] = Counter(
        (f.cluster, node.domain(level)) for f, node in view.alive if f.role is Role.MASTER
    )
    for (cluster, _), n in inside.items():
        worst[cluster] = max(worst[cluster], total[cluster] // 2 + 1 - (alive[cluster] - n))
    return worst


def survival_levels(policy: Policy, nodes: Iterable[Node]) -> list[Level]:
    """The levels whose one-domain loss is judged: those whose topology label the policy names,
    the rack level only where some node has a rack label of its own (without, each zone is one
    rack and the rack verdict would repeat the zone's)."""
    levels: list[Level] = []
    for level in LEVELS:
        if not policy.topology.key(level):
            continue
        if level == "rack" and not any(not n.rack.endswith("/*") for n in nodes):
            continue
        levels.append(level)
    return levels


def _check_survive(policy: Policy, view: _View) -> list[Violation]:
    """Losing any one domain keeps every shard and a master majority: hard at the level
    ``rules.survive`` names, a soft finding at every other level in use (the tool's promise is
    survival, so a placement that breaks it is never reported clean)."""
    violations = []
    for level in survival_levels(policy, view.snapshot.nodes):
        severity: Severity = "hard" if policy.rules.survive == level else "soft"
        for loss in _domain_losses(view, level):
            if not loss.shards_lost and not loss.clusters_lost:
                continue
            if loss.domain is None and severity == "soft":
                continue  # nodes without the label are no one domain (none known to share it)
            failing_shards, failing_clusters = set(loss.shards_lost), set(loss.clusters_lost)
            pods = sorted(
                f.member.key
                for f, _ in loss.members
                if f.shard in failing_shards or f.cluster in failing_clusters
            )
            lost_clusters = [
                (k, loss.masters_alive[k] - loss.masters_in[k], loss.masters_total[k])
                for k in loss.clusters_lost
            ]
            violations.append(
                survive_violation(
                    level,
                    loss.domain,
                    pods,
                    sorted({n.name for _, n in loss.members}),
                    loss.shards_lost,
                    lost_clusters,
                    severity,
                )
            )
    return violations


class Takes(NamedTuple):
    """What losing one domain takes, level by level, and what is lost before any failure."""

    by_level: dict[Level, list[DomainTakes]]
    dead_shards: list[str]
    """Shards with no member alive: their pods on nodes gone from the snapshot, or unplaced."""
    short: dict[str, tuple[int, int]]
    """Per Redis cluster already at or under half its masters alive: (alive, in all)."""


def domain_takes(snapshot: Snapshot, plan: Plan, levels: Iterable[Level]) -> Takes:
    """Per level, per domain and Redis cluster: what that one domain's loss takes (a master
    majority, whole shards), for the domains that take something; and what every domain's loss
    takes because it is lost already, for a verdict to name once. The plan's placement is
    walked once for every level."""
    view = _View(snapshot, plan)
    census = _census(view)
    return Takes(
        {level: _level_takes(view, level, census) for level in levels},
        census.dead_shards,
        _short(census),
    )


def _level_takes(view: _View, level: Level, census: _Census) -> list[DomainTakes]:
    found = []
    for loss in _domain_losses(view, level, census):
        if loss.domain is None:
            continue  # nodes without the label: no one domain to lose
        lost_shards: dict[str, list[str]] = defaultdict(list)
        for shard in loss.shards_lost:
            cluster, _, name = shard.rpartition("/")
            lost_shards[cluster].append(name)
        for cluster in sorted(set(loss.clusters_lost) | set(lost_shards)):
            found.append(
                DomainTakes(
                    domain=loss.domain,
                    cluster=cluster,
                    masters=loss.masters_total[cluster],
                    masters_left=loss.masters_alive[cluster] - loss.masters_in[cluster],
                    shards_lost=lost_shards.get(cluster, []),
                )
            )
    return found


def survive_violation(
    level: Level,
    domain: str | None,
    pods: list[str],
    nodes: list[str],
    shards_lost: list[str],
    clusters_lost: list[tuple[str, int, int]],
    severity: Severity = "hard",
) -> Violation:
    """Losing one domain: the shards left with no member alive, and per cluster left short of a
    master majority its (cluster, masters left alive, masters in all)."""
    parts = []
    if shards_lost:
        parts.append(f"shard(s) {', '.join(shards_lost)} with no member alive")
    for cluster, left, total in clusters_lost:
        parts.append(
            f"cluster {cluster} with {left} of {total} masters alive (needs a strict majority)"
        )
    return _violation(
        "survive",
        severity,
        pods,
        nodes,
        f"losing {level} {domain if domain is not None else '(no label)'} "
        f"leaves {'; '.join(parts)}",
    )


def _worst_domain_loss(view: _View) -> list[DomainLoss]:
    """Counts only, per domain: the share of masters and the number of shards it takes down.

    Building every domain's full loss (member lists, sorted shard names) would cost domains x
    dead shards at the host level of a large cluster; the ranking needs two numbers per domain.
    A shard is lost with a domain exactly when all its alive members are in that domain.
    """
    census = _census(view)
    dead = len(census.dead_shards)
    # Per alive member its domains at every level, read once: (host, rack, zone) as LEVELS.
    shard_domains: list[list[tuple[str | None, ...]]] = []
    master_domains: list[tuple[str, tuple[str | None, ...]]] = []
    for here in view.shard_alive.values():
        per_member: list[tuple[str | None, ...]] = []
        for f, node in here:
            domains_of: tuple[str | None, ...] = (node.host, node.rack, node.zone)  # as LEVELS
            per_member.append(domains_of)
            if f.role is Role.MASTER:
                master_domains.append((f.cluster, domains_of))
        shard_domains.append(per_member)
    result = []
    assert LEVELS == ("host", "rack", "zone")
    for i, level in enumerate(LEVELS):
        domains: set[str | None] = set()
        lost: dict[str | None, int] = defaultdict(int)
        for members in shard_domains:
            first = members[0][i]
            held = {d[i] for d in members}
            domains |= held
            if len(held) == 1:
                lost[first] += 1
        masters_in: dict[tuple[str | None, str], int] = defaultdict(int)
        for cluster, domains_of in master_domains:
            masters_in[(domains_of[i], cluster)] += 1
        top: dict[str | None, tuple[float, str]] = {}
        for (domain, cluster), n in masters_in.items():
            share = n / census.masters_total[cluster]
            current = top.get(domain)
            if (
                current is None
                or share > current[0]
                or (share == current[0] and cluster < current[1])
            ):
                top[domain] = (share, cluster)
        best: tuple[float, int, str | None] | None = None
        for domain in sorted(domains, key=lambda d: (d is None, d or "")):
            ratio = top[domain][0] if domain in top else 0.0
            shards_lost = dead + lost[domain]
            if best is None or (ratio, shards_lost) > best[:2]:
                best = (ratio, shards_lost, domain)
        if best is None:
            result.append(DomainLoss(level=level, domain=None, master_loss_ratio=0.0))
            continue
        ratio, shards_lost, domain = best
        result.append(
            DomainLoss(
                level=level,
                domain=domain,
                master_loss_ratio=ratio,
                cluster=top[domain][1] if domain in top else None,
                shards_lost=shards_lost,
            )
        )
    return result


def worst_domain_loss(snapshot: Snapshot, policy: Policy, plan: Plan) -> list[DomainLoss]:
    """Per level (host, rack, zone): the one failure that takes the largest share of some cluster's masters.

    Ties go to the domain that leaves more shards with no member alive, then to the first name.
    A level with no alive member reports domain None and ratio 0.
    """
    return _worst_domain_loss(_View(snapshot, plan))


# --------------------------------------------------------------------------- the whole check


def _violations(policy: Policy, view: _View) -> list[Violation]:
    snapshot, finals = view.snapshot, view.finals
    return [
        *_check_fits(snapshot, finals),
        *_check_capacity(snapshot, finals),
        *_check_volume_matching(snapshot, finals),
        *_check_shard_spread(view),
        *_check_master_exclusivity(policy, view),
        *_check_shard_roles(view),
        *_check_replica_separation(policy, view),
        *_check_survive(policy, view),
    ]


def check_plan(snapshot: Snapshot, policy: Policy, plan: Plan) -> list[Violation]:
    """Every rule broken by the plan's final placement, hard and soft."""
    return _violations(policy, _View(snapshot, plan))


@dataclass(frozen=True)
class Assessment:
    """check_plan, evaluate_objective and worst_domain_loss of one plan, in one go."""

    violations: list[Violation]
    terms: dict[str, float]
    worst_domain_loss: list[DomainLoss]
    running_total: float | None = None
    """The objective of the members already running, alone (when asked for)."""


def assess(
    snapshot: Snapshot, policy: Policy, plan: Plan, *, running_total: bool = False
) -> Assessment:
    """All three verdicts on a plan from one walk over the final placement.

    The same answers as calling the three functions, for a third of the work: the solver judges
    every plan it returns, and on a large cluster that walk dominates a small batch's solve.
    ``running_total`` adds the objective of the running members alone, a valid lower bound for
    place mode that the solver reports when it narrowed its model.
    """
    view = _View(snapshot, plan)
    terms, running = _objective_with_running(policy, view, running=running_total)
    return Assessment(
        violations=_violations(policy, view),
        terms=terms,
        worst_domain_loss=_worst_domain_loss(view),
        running_total=running,
    )


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


def audit(snapshot: Snapshot, policy: Policy, plan: Plan | None = None) -> list[Violation]:
    """The violations of the placement as it runs now (or as ``plan`` leaves it), plus members
    at risk on a bad node and everything ``standing_violations`` adds."""
    judged = plan if plan is not None else keep_plan(snapshot)
    view = _View(snapshot, judged)
    return [*_at_risk(view), *_violations(policy, view), *_standing(snapshot, view)]


def standing_violations(snapshot: Snapshot, plan: Plan) -> list[Violation]:
    """Hard problems of the cluster that ``check_plan`` (which judges what a plan changes) misses.

    * A member the plan leaves on a node with a ``NoExecute`` taint it does not tolerate: the
      kubelet evicts it. (A ``NoSchedule`` taint added after binding leaves it running.)
    * A shard left out of planning that runs two masters (``Snapshot.skipped_members``): two
      Redis masters for one slot range.
    """
    if not any(t.effect == "NoExecute" for node in snapshot.nodes for t in node.taints):
        return _two_running_masters(snapshot)  # no node evicts: no member to walk
    return _standing(snapshot, _View(snapshot, plan))


def _standing(snapshot: Snapshot, view: _View) -> list[Violation]:
    violations = []
    for f, node in view.alive:
        if f.arrives:
            continue  # fits judges it where it arrives
        evicting = [t for t in untolerated_taints(f.member.pod, node) if t.effect == "NoExecute"]
        if evicting:
            violations.append(
                _violation(
                    "fits",
                    "hard",
                    [f.key],
                    [node.name],
                    f"{f.key} runs on {node.name}, whose taint "
                    f"{', '.join(_taint_text(t) for t in evicting)} it does not tolerate: "
                    "the node evicts it (NoExecute)",
                )
            )
    return [*violations, *_two_running_masters(snapshot)]


def _two_running_masters(snapshot: Snapshot) -> list[Violation]:
    masters: dict[str, list[Member]] = defaultdict(list)
    for m in snapshot.skipped_members:
        if m.role is Role.MASTER and not m.pod.pending and not m.pod.deleting:
            masters[m.shard_key].append(m)
    return [
        _violation(
            "shard-roles",
            "hard",
            sorted(m.key for m in running),
            sorted({m.pod.node_name for m in running if m.pod.node_name}),
            f"shard {shard} runs {len(running)} masters "
            f"({', '.join(f'{m.key} on {m.pod.node_name}' for m in sorted(running, key=lambda m: m.key))}): "
            "one slot range has one master; fail one over or fix its role label",
        )
        for shard, running in sorted(masters.items())
        if len(running) > 1
    ]


def _at_risk(view: _View) -> list[Violation]:
    """Members that stay on a node that is gone, not Ready, unschedulable or newly tainted:
    still running, but nothing could be placed there again."""
    nodes = view.snapshot.node_by_name
    at_risk = []
    for f in view.finals:
        name = f.node
        if name is None or f.arrives or f.member.pod.pending:
            continue
        node = nodes.get(name)
        if node is None:
            problem = "is not in the snapshot"
        elif not node.ready:
            problem = "is not Ready"
        elif node.unschedulable:
            problem = "is unschedulable"
        else:
            blocking = [
                t for t in untolerated_taints(f.member.pod, node) if t.effect == "NoSchedule"
            ]
            if not blocking:
                continue
            problem = (
                f"is tainted {', '.join(_taint_text(t) for t in blocking)}, which it does not "
                "tolerate: Kubernetes leaves it running (NoSchedule keeps new pods off), but it "
                "could not be placed there again"
            )
        at_risk.append(
            _violation("fits", "soft", [f.key], [name], f"{f.key} runs on a node that {problem}")
        )
    return at_risk


def master_quorum_warnings(snapshot: Snapshot, policy: Policy) -> list[str]:
    """Redis clusters too small to fail over on their own: one master per shard, and promoting a
    replica takes a majority of masters, so fewer than 3 masters cannot survive losing one."""
    shards: dict[str, set[str]] = defaultdict(set)
    for m in (*snapshot.members, *snapshot.skipped_members):
        shards[m.cluster].add(m.shard_key)
    warnings = []
    level = policy.rules.survive
    for cluster, keys in sorted(shards.items()):
        n = len(keys)
        if n >= 3:
            continue
        text = (
            f"Redis cluster {cluster} has {n} shard{'s' if n != 1 else ''}, so {n} "
            f"master{'s' if n != 1 else ''}: "
            "Redis Cluster needs at least 3 masters to fail over on its own (a replica is "
            "promoted only by a majority of masters)"
        )
        if level != "none":
            text += (
                f"; with survive: {level}, {n} master{'s' if n != 1 else ''} can never keep a "
                "majority after losing one"
            )
        warnings.append(text)
    return warnings


# --------------------------------------------------------------------------- objective


def evaluate_objective(snapshot: Snapshot, policy: Policy, plan: Plan) -> dict[str, float]:
    """The weighted objective terms of the final placement (objective.md), and their total."""
    return _objective_terms(policy, _View(snapshot, plan))


def _objective_terms(policy: Policy, view: _View) -> dict[str, float]:
    return _objective_with_running(policy, view, running=False)[0]


def _objective_with_running(
    policy: Policy, view: _View, *, running: bool
) -> tuple[dict[str, float], float | None]:
    """The objective terms and, with ``running``, the total of the members already running alone.

    In place mode that second figure is a lower bound on any plan's objective: every term only
    grows as pods are added (more pairs, more masters per zone and node, more memory). Both come
    from one walk over the placement.
    """
    weights = policy.weights
    nodes = view.snapshot.node_by_name
    terms: dict[str, float] = {}
    base = 0.0

    for level in ("rack", "zone"):
        if policy.rules.replica_separation.strength(level) == "preferred":
            pairs = view.pairs(level)
            terms[level] = float(weights.separation(level) * len(pairs))
            if running:
                kept = sum(
                    1 for r, m in pairs if not r.member.pod.pending and not m.member.pod.pending
                )
                base += weights.separation(level) * kept
        else:
            terms[level] = 0.0

    # Masters per (Redis cluster, zone) and per (Redis cluster, rack): what one failure takes.
    per_cluster_domain: dict[tuple[str, str | None], list[int]] = defaultdict(lambda: [0, 0])
    per_cluster_rack: dict[tuple[str, str | None], list[int]] = defaultdict(lambda: [0, 0])
    per_cluster_zone_members: dict[tuple[str, str | None], list[int]] = defaultdict(lambda: [0, 0])
    per_node: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    superseded = view.snapshot.superseded
    on_superseded = [0, 0]
    memory: dict[str, list[int]] = defaultdict(lambda: [0, 0, 0])
    # Per key: [all final members, running members only]; memory also counts running members.
    for f, node in view.alive:
        keeps = 1 if running and not f.member.pod.pending else 0
        used = f.member.pod.requests.memory
        entry = memory[node.name]
        entry[0] += used
        entry[1] += used * keeps
        entry[2] += keeps
        members = per_cluster_zone_members[(f.cluster, node.zone)]
        members[0] += 1
        members[1] += keeps
        if node.name in superseded:
            on_superseded[0] += 1
            on_superseded[1] += keeps
        if f.role is Role.MASTER:
            domain = per_cluster_domain[(f.cluster, node.zone)]
            domain[0] += 1
            domain[1] += keeps
            rack = per_cluster_rack[(f.cluster, f"{node.zone}/{node.rack}")]
            rack[0] += 1
            rack[1] += keeps
            on_node = per_node[node.name]
            on_node[0] += 1
            on_node[1] += keeps

    def worst_loss(per_domain: dict[tuple[str, str | None], list[int]], i: int) -> int:
        """Per Redis cluster, the masters its worst single domain failure takes down, summed."""
        worst: dict[str, int] = {}
        for (cluster, _), counts in per_domain.items():
            worst[cluster] = max(worst.get(cluster, 0), counts[i])
        return sum(worst.values())

    def survival(i: int) -> int:
        return weights.survival * worst_loss(per_cluster_domain, i)

    def rack_survival(i: int) -> int:
        return weights.rack_survival * worst_loss(per_cluster_rack, i)

    def member_spread(i: int) -> int:
        """Per Redis cluster, the members its worst single zone failure takes, summed."""
        return weights.member_spread * worst_loss(per_cluster_zone_members, i)

    def master_balance(i: int) -> int:
        """Masters beyond the first on any node."""
        return weights.master_balance * sum(max(0, counts[i] - 1) for counts in per_node.values())

    terms["survival"] = float(survival(0))
    terms["rackSurvival"] = float(rack_survival(0))
    terms["memberSpread"] = float(member_spread(0))
    terms["superseded"] = float(weights.superseded * on_superseded[0])
    terms["masterBalance"] = float(master_balance(0))

    for pod in view.snapshot.other_pods:
        hosting = memory.get(pod.node_name or "")
        if hosting is not None:
            hosting[0] += pod.requests.memory
            hosting[1] += pod.requests.memory

    def max_util(i: int) -> int:
        """Only nodes hosting a member (of the kind counted) are in the running."""
        hosting = memory.items() if i == 0 else ((k, e) for k, e in memory.items() if e[2])
        return max(
            (
                100 * e[i] // nodes[name].allocatable.memory
                for name, e in hosting
                if nodes[name].allocatable.memory > 0
            ),
            default=0,
        )

    terms["loadBalance"] = float(weights.load_balance * max_util(0))

    moves = sum(1 for a in view.plan.assignments if a.action == "move")
    terms["move"] = float(weights.move * moves)
    terms["failover"] = float(weights.failover * len(view.plan.failovers))
    terms["total"] = sum(terms.values())
    if not running:
        return terms, None
    base += survival(1) + rack_survival(1) + member_spread(1) + master_balance(1)
    base += weights.superseded * on_superseded[1]
    base += weights.load_balance * max_util(1)
    return terms, float(base)
