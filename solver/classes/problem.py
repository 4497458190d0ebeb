"""The solver's view of a snapshot: interchangeable nodes grouped into classes, interchangeable
pods grouped into groups. CP-SAT decides how many members of each group go to each class;
solver/assign.py then picks the concrete node inside each class.

Grouping is what makes thousands of nodes tractable: the placement rules only need counts per
class and per topology domain, and nodes in one class are identical for every rule.
"""

import math
from collections import Counter, defaultdict
from dataclasses import dataclass, field, replace
from functools import cached_property

from models.cluster import Member, Node, Pod, Role
from models.plan import Mode
from models.policy import Policy
from models.resources import Resources
from models.snapshot import Snapshot
from solver.predicates import blocking_reason, node_accepts_new_pods
from solver.volumes import VolumeSlots

DEFAULT_MAX_VARIABLES = 60_000
"""Above this many decision variables, each group keeps only the roomiest classes of every rack."""
MAX_MODEL_MEMORY = 2**40
"""Largest memory figure (in the model's unit) CP-SAT sees: products with utilisation percents
and counts must stay exact 64-bit integers."""


def memory_unit(values: list[int]) -> tuple[int, bool]:
    """The memory unit of one model, and whether it is exact.

    The greatest common divisor of every figure the model uses (requests, allocatable, used)
    loses nothing; only when even that leaves figures beyond MAX_MODEL_MEMORY (exabyte-sized
    nodes) is a coarser power of two taken, rounding the safe way.
    """
    positive = [v for v in values if v > 0]
    if not positive:
        return 1, True
    unit = math.gcd(*positive)
    largest = max(positive)
    if largest // unit <= MAX_MODEL_MEMORY:
        return unit, True
    return 2 ** (largest.bit_length() - MAX_MODEL_MEMORY.bit_length() + 1), False


def model_units(r: Resources, *, round_up: bool, unit: int = 1) -> tuple[int, int, int]:
    """Resources in the model's units (cpu millicores, memory ``unit``s, pods), rounded safely."""
    mem = -(-r.memory // unit) if round_up else r.memory // unit
    return (r.cpu, mem, r.pods)


@dataclass
class NodeClass:
    index: int
    nodes: list[Node]
    zone: str
    rack: str
    host: str | None
    """Set when several Node objects share one host: the class then lies inside that host."""
    alloc: tuple[int, int, int]
    used: tuple[int, int, int]
    fixed_masters: int
    fixed_members: int
    volumes: tuple[tuple[str, int], ...] = ()
    """Free local PVs per storage class on each of its nodes (solver/volumes.py)."""
    superseded: bool = False
    """Its nodes are superseded by newer ones of their pool (models/maintenance.py)."""

    @property
    def size(self) -> int:
        return len(self.nodes)

    @property
    def free(self) -> tuple[int, int, int]:
        return tuple(max(0, a - u) for a, u in zip(self.alloc, self.used, strict=True))


@dataclass
class Group:
    """Members that are interchangeable for every rule: same shard, requests, constraints, roles."""

    index: int
    shard: str
    cluster: str
    members: list[Member]
    roles: tuple[Role, ...]
    requests: tuple[int, int, int]
    candidates: list[int] = field(default_factory=list)
    origin_class: int | None = None
    origin_node: str | None = None
    current_role: Role | None = None

    @property
    def size(self) -> int:
        return len(self.members)


@dataclass
class Shard:
    key: str
    cluster: str
    groups: list[int]
    fixed: list[tuple[Member, Node | None]]
    """Members that stay where they are (running, and not movable in this mode)."""
    current_master: Member | None
    master_possible: bool

    @cached_property
    def fixed_master(self) -> tuple[Member, Node | None] | None:
        """Cached: every rule asks, once per shard, and a large cluster has thousands."""
        return next(((m, n) for m, n in self.fixed if m.role is Role.MASTER), None)


@dataclass
class Problem:
    snapshot: Snapshot
    policy: Policy
    mode: Mode
    classes: list[NodeClass]
    groups: list[Group]
    shards: dict[str, Shard]
    node_class: dict[str, int]
    pod_load: dict[str, Resources]
    """Per node: requests of everything that stays there (other pods and fixed members)."""
    skipped: list[tuple[Member, str]]
    """Members excluded before solving, with why (e.g. their shard is invalid or being deleted)."""
    fixed_members: list[tuple[Member, Node | None]]
    pruned: bool = False
    """True when candidate classes were limited: the bound is then the restricted model's."""
    exact: bool = True
    """Memory figures are exact in the model's unit (false only for exabyte-sized nodes)."""

    def zones(self) -> list[str]:
        return sorted(
            {c.zone for c in self.classes}
            | {n.zone for n in self.snapshot.nodes if n.zone is not None}
        )

    def domain_of_class(self, c: NodeClass, level: str) -> str:
        if level == "zone":
            return c.zone
        if level == "rack":
            return c.rack
        return c.host or f"class:{c.index}"


def constraint_signature(pod: Pod) -> tuple[object, ...]:
    """What decides which nodes accept the pod: pods alike in it are one kind to every filter."""
    return (
        pod.tolerations,
        tuple(sorted(pod.node_selector.items())),
        pod.affinity_terms,
        tuple(n.rule for n in pod.volumes),
    )


def build_problem(
    snapshot: Snapshot,
    policy: Policy,
    mode: Mode,
    max_variables: int | None = DEFAULT_MAX_VARIABLES,
    movable_shards: set[str] | None = None,
) -> Problem:
    """The classes, groups and shards of one solve; ``max_variables=None`` leaves candidates
    unlimited (see ``limit_candidates``), for a caller that narrows them its own way first."""
    nodes = snapshot.node_by_name
    movable: list[Member] = []
    fixed: list[tuple[Member, Node | None]] = []
    skipped: list[tuple[Member, str]] = []
    for member in snapshot.members:
        pod = member.pod
        if pod.pending:
            if pod.deleting:
                skipped.append((member, "pod is being deleted"))
            else:
                movable.append(member)
        elif (
            mode == "rebalance"
            and not pod.deleting
            and pod.node_name in nodes
            and (movable_shards is None or member.shard_key in movable_shards)
        ):
            movable.append(member)
        else:
            fixed.append((member, nodes.get(pod.node_name or "")))

    # Load that stays put on each node, summed as plain integers (Resources arithmetic builds a
    # model per addition, which dominates on a cluster with thousands of running pods).
    totals: dict[str, list[int]] = defaultdict(lambda: [0, 0, 0])
    for pod in snapshot.other_pods:
        if pod.node_name:
            total, r = totals[pod.node_name], pod.requests
            total[0] += r.cpu
            total[1] += r.memory
            total[2] += r.pods
    fixed_masters: Counter[str] = Counter()
    fixed_count: Counter[str] = Counter()
    fixed_by_shard: dict[str, list[tuple[Member, Node | None]]] = defaultdict(list)
    for member, node in fixed:
        fixed_by_shard[member.shard_key].append((member, node))
        if node is not None:
            total, r = totals[node.name], member.pod.requests
            total[0] += r.cpu
            total[1] += r.memory
            total[2] += r.pods
            fixed_count[node.name] += 1
            if member.role is Role.MASTER:
                fixed_masters[node.name] += 1
    load = {
        name: Resources(cpu=cpu, memory=memory, pods=pods)
        for name, (cpu, memory, pods) in totals.items()
    }
    no_load = Resources()

    # Pod constraint types, to split nodes by which types they accept.
    types: dict[tuple[object, ...], Pod] = {}
    for member in movable:
        types.setdefault(constraint_signature(member.pod), member.pod)
    type_list = list(types.values())

    figures = [m.pod.requests.memory for m in movable]
    figures += [n.allocatable.memory for n in snapshot.nodes]
    figures += [r.memory for r in load.values()]
    unit, exact = memory_unit(figures)
    host_sizes = Counter(n.host for n in snapshot.nodes)
    superseded = snapshot.superseded
    volume_slots = VolumeSlots(snapshot)
    classes: list[NodeClass] = []
    node_class: dict[str, int] = {}
    by_key: dict[tuple[object, ...], NodeClass] = {}
    for node in snapshot.nodes:
        if not node_accepts_new_pods(node) or node.zone is None:
            continue
        eligible = tuple(blocking_reason(t, node) is None for t in type_list)
        if type_list and not any(eligible):
            continue
        alloc = model_units(node.allocatable, round_up=False, unit=unit)
        used = model_units(load.get(node.name, no_load), round_up=True, unit=unit)
        host = node.host if host_sizes[node.host] > 1 else None
        key = (
            node.zone,
            node.rack,
            host,
            alloc,
            used,
            fixed_masters[node.name],
            fixed_count[node.name],
            volume_slots.key(node.name),
            node.name in superseded,
            eligible,
        )
        cls = by_key.get(key)
        if cls is None:
            cls = NodeClass(
                index=len(classes),
                nodes=[],
                zone=node.zone,
                rack=node.rack,
                host=host,
                alloc=alloc,
                used=used,
                fixed_masters=fixed_masters[node.name],
                fixed_members=fixed_count[node.name],
                volumes=volume_slots.key(node.name),
                superseded=node.name in superseded,
            )
            by_key[key] = cls
            classes.append(cls)
        cls.nodes.append(node)
        node_class[node.name] = cls.index
    class_eligible: dict[int, tuple[bool, ...]] = {}
    for class_key, cls in by_key.items():
        class_eligible[cls.index] = class_key[-1]
    type_index = {sig: i for i, sig in enumerate(types)}

    # Shards and their groups.
    shards: dict[str, Shard] = {}
    for shard_key, members in snapshot.shards.items():
        cluster = members[0].cluster
        shard_fixed = fixed_by_shard.get(shard_key, [])
        current_master = next(
            (m for m in members if m.role is Role.MASTER and not m.pod.pending), None
        )
        shards[shard_key] = Shard(
            key=shard_key,
            cluster=cluster,
            groups=[],
            fixed=shard_fixed,
            current_master=current_master,
            master_possible=False,
        )

    groups: list[Group] = []
    grouped: dict[tuple[object, ...], Group] = {}
    candidate_cache: dict[tuple[int, tuple[int, int, int]], list[int]] = {}
    for member in movable:
        shard = shards[member.shard_key]
        roles = _allowed_roles(member, shard, mode)
        requests = model_units(member.pod.requests, round_up=True, unit=unit)
        sig = constraint_signature(member.pod)
        origin = member.pod.node_name if not member.pod.pending else None
        if origin is None:
            gkey: tuple[object, ...] = (member.shard_key, roles, requests, sig)
            group = grouped.get(gkey)
            if group is not None:
                group.members.append(member)
                continue
        group = Group(
            index=len(groups),
            shard=member.shard_key,
            cluster=member.cluster,
            members=[member],
            roles=roles,
            requests=requests,
            origin_class=node_class.get(origin) if origin else None,
            origin_node=origin,
            current_role=member.role if origin else None,
        )
        ckey = (type_index[sig], requests)
        if ckey not in candidate_cache:
            candidate_cache[ckey] = [
                c.index
                for c in classes
                if class_eligible[c.index][ckey[0]]
                and all(r <= f for r, f in zip(requests, c.free, strict=True))
            ]
        group.candidates = list(candidate_cache[ckey])
        if group.origin_class is not None and group.origin_class not in group.candidates:
            group.candidates.append(group.origin_class)
        if origin is None:
            grouped[(member.shard_key, roles, requests, sig)] = group
        groups.append(group)
        shard.groups.append(group.index)
        if Role.MASTER in roles:
            shard.master_possible = True
    for shard in shards.values():
        if shard.fixed_master is not None:
            shard.master_possible = True

    pruned = max_variables is not None and _limit_candidates(groups, classes, max_variables)
    return Problem(
        pruned=pruned or movable_shards is not None,
        exact=exact,
        snapshot=snapshot,
        policy=policy,
        mode=mode,
        classes=classes,
        groups=groups,
        shards=shards,
        node_class=node_class,
        pod_load=dict(load),
        skipped=skipped,
        fixed_members=fixed,
    )


def _allowed_roles(member: Member, shard: Shard, mode: Mode) -> tuple[Role, ...]:
    """Which roles the solver may give a member it places.

    A labelled pending pod keeps its label. An unlabelled pending pod may become master only when
    the shard has no master yet. In rebalance mode any running member may become master (a failover).
    """
    if mode == "rebalance" and not member.pod.pending:
        return (Role.MASTER, Role.REPLICA)
    if member.role is not None:
        return (member.role,)
    if shard.current_master is not None:
        return (Role.REPLICA,)
    return (Role.MASTER, Role.REPLICA)


def limit_candidates(
    problem: Problem,
    max_variables: int = DEFAULT_MAX_VARIABLES,
    keep: dict[int, set[int]] | None = None,
) -> Problem:
    """``problem`` with its candidates limited as ``build_problem`` limits them by default;
    ``keep`` (group -> classes) survives the limit, so a seed placement stays a solution."""
    groups = [replace(g, candidates=list(g.candidates)) for g in problem.groups]
    pruned = _limit_candidates(groups, problem.classes, max_variables, keep or {})
    return replace(problem, groups=groups, pruned=problem.pruned or pruned)


def _limit_candidates(
    groups: list[Group],
    classes: list[NodeClass],
    max_variables: int,
    keep: dict[int, set[int]] | None = None,
) -> bool:
    """Keep, per group and rack, the classes with the most free memory, so the model stays small.

    Every rack (so every zone) stays reachable, which is all the domain rules need; what is given
    up is the choice among near-identical, fuller nodes of one rack. A running member always keeps
    its own class so that staying put stays possible.
    """
    size = sum(len(g.candidates) * len(g.roles) for g in groups)
    if size <= max_variables or not groups:
        return False
    racks = {c.rack for c in classes} or {""}
    per_rack = max(1, max_variables // (len(racks) * sum(len(g.roles) for g in groups)))
    ranked = sorted(classes, key=lambda c: (-c.free[1], -c.size, c.index))
    rank = {c.index: i for i, c in enumerate(ranked)}
    for g in groups:
        kept: list[int] = []
        taken: dict[str, int] = {}
        must = (keep or {}).get(g.index, set())
        for c in sorted(g.candidates, key=rank.__getitem__):
            rack = classes[c].rack
            if taken.get(rack, 0) < per_rack or c == g.origin_class or c in must:
                kept.append(c)
                taken[rack] = taken.get(rack, 0) + 1
        g.candidates = sorted(kept)
    return True
