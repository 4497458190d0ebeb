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

MIB = 1024 * 1024
DEFAULT_MAX_VARIABLES = 60_000
"""Above this many decision variables, each group keeps only the roomiest classes of every rack."""


def model_units(r: Resources, *, round_up: bool) -> tuple[int, int, int]:
    """Resources in the model's units (cpu millicores, memory MiB, pods), rounded the safe way."""
    mem = math.ceil(r.memory / MIB) if round_up else r.memory // MIB
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

    @property
    def size(self) -> int:
        return len(self.nodes)

    @property
    def free(self) -> tuple[int, int, int]:
        return tuple(max(0, a - u) for a, u in zip(self.alloc, self.used, strict=True))  # type: ignore[return-value]


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


def _constraint_signature(pod: Pod) -> tuple[object, ...]:
    return (pod.tolerations, tuple(sorted(pod.node_selector.items())), pod.affinity_terms)


def build_problem(
    snapshot: Snapshot,
    policy: Policy,
    mode: Mode,
    max_variables: int | None = DEFAULT_MAX_VARIABLES,
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
        elif mode == "rebalance" and not pod.deleting and pod.node_name in nodes:
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
        types.setdefault(_constraint_signature(member.pod), member.pod)
    type_list = list(types.values())

    host_sizes = Counter(n.host for n in snapshot.nodes)
    classes: list[NodeClass] = []
    node_class: dict[str, int] = {}
    by_key: dict[tuple[object, ...], NodeClass] = {}
    for node in snapshot.nodes:
        if not node_accepts_new_pods(node) or node.zone is None:
            continue
        eligible = tuple(blocking_reason(t, node) is None for t in type_list)
        if type_list and not any(eligible):
            continue
        alloc = model_units(node.allocatable, round_up=False)
        used = model_units(load.get(node.name, no_load), round_up=True)
        host = node.host if host_sizes[node.host] > 1 else None
        key = (
            node.zone,
            node.rack,
            host,
            alloc,
            used,
            fixed_masters[node.name],
            fixed_count[node.name],
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
            )
            by_key[key] = cls
            classes.append(cls)
        cls.nodes.append(node)
        node_class[node.name] = cls.index
    class_eligible: dict[int, tuple[bool, ...]] = {}
    for class_key, cls in by_key.items():
        class_eligible[cls.index] = class_key[-1]  # type: ignore[assignment]
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
        requests = model_units(member.pod.requests, round_up=True)
        sig = _constraint_signature(member.pod)
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
        pruned=pruned,
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


def limit_candidates(problem: Problem, max_variables: int = DEFAULT_MAX_VARIABLES) -> Problem:
    """``problem`` with its candidates limited as ``build_problem`` limits them by default."""
    groups = [replace(g, candidates=list(g.candidates)) for g in problem.groups]
    pruned = _limit_candidates(groups, problem.classes, max_variables)
    return replace(problem, groups=groups, pruned=problem.pruned or pruned)


def _limit_candidates(groups: list[Group], classes: list[NodeClass], max_variables: int) -> bool:
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
        for c in sorted(g.candidates, key=rank.__getitem__):
            rack = classes[c].rack
            if taken.get(rack, 0) < per_rack or c == g.origin_class:
                kept.append(c)
                taken[rack] = taken.get(rack, 0) + 1
        g.candidates = sorted(kept)
    return True


SMALL_BATCH_MIN_VARIABLES = 2_000
"""Below this many decision variables the full model is already quick: no narrowing."""
SMALL_BATCH_MAX_PODS = 600
"""Narrowing is for the binder's batches (a few to ~100 shards); a bigger batch needs its choice."""


NARROW_MAX_NODES_PER_RACK = 16
"""A group's kept classes need not hold the whole batch's share of a rack: the classes are
ranked alike for every group, so their union does. Without this cap the model grows with the
square of the batch (55,000 variables for 200 shards, no solution within 5 s); with it, 15,000
(docs/benchmarks.md, binder throughput)."""


def _class_rank(
    cls: NodeClass, requests: tuple[int, int, int], master: bool, cap: int
) -> tuple[int, int, int, int]:
    """Best first: master room (for groups that may hold the master), then utilisation after
    one more member, then free memory. The same things the soft rules pay for."""
    no_master_room = int(master and cls.fixed_masters >= cap)
    stacked = cls.fixed_masters if master else 0
    alloc = cls.alloc[1]
    after = 10_000 * (cls.used[1] + requests[1]) // alloc if alloc > 0 else 10_000
    return (no_master_room, stacked, after, -cls.free[1])


def narrow_for_batch(
    problem: Problem, seed_classes: dict[int, set[int]], cap: int
) -> Problem | None:
    """A copy of ``problem`` whose groups keep only their most promising classes, or None.

    For a small batch of new shards in a large running cluster almost every class is a
    candidate, though the answer uses a handful. Per group and rack this keeps the best-ranked
    classes until they hold enough nodes for the whole batch's share of that rack (at most
    ``NARROW_MAX_NODES_PER_RACK``), plus every
    class the seed placement used (so the seed stays a solution and CP-SAT can only improve on
    it). Every rack, hence every zone, stays reachable, which the domain rules need. Whether the
    narrowed model still places everything is the caller's to check: it must re-solve unpruned
    when not (see solver/solve.py).
    """
    if problem.mode != "place" or not problem.groups:
        return None
    if sum(g.size for g in problem.groups) > SMALL_BATCH_MAX_PODS:
        return None
    size = sum(len(g.candidates) * len(g.roles) for g in problem.groups)
    if size <= SMALL_BATCH_MIN_VARIABLES:
        return None
    classes = problem.classes
    racks = {c.rack for c in classes} or {""}
    pending = sum(g.size for g in problem.groups)
    masters = sum(1 for s in problem.shards.values() if s.groups and s.fixed_master is None)
    cache: dict[tuple[object, ...], list[int]] = {}
    groups: list[Group] = []
    for g in problem.groups:
        master = Role.MASTER in g.roles
        # Nodes each rack must offer: the group's own members, and room for a fair share of the
        # batch's members of this kind (masters are few and need master room; replicas many).
        share = masters if master and Role.REPLICA not in g.roles else pending
        need = max(g.size, min(NARROW_MAX_NODES_PER_RACK, -(-2 * share // len(racks))))
        key = (tuple(g.candidates), g.requests, master, need)
        kept = cache.get(key)
        if kept is None:
            ranked = sorted(
                g.candidates,
                key=lambda c: (*_class_rank(classes[c], g.requests, master, cap), c),
            )
            nodes_kept: dict[str, int] = defaultdict(int)
            kept = []
            for c in ranked:
                rack = classes[c].rack
                if nodes_kept[rack] < need:
                    kept.append(c)
                    nodes_kept[rack] += classes[c].size
            cache[key] = kept
        chosen = set(kept) | (seed_classes.get(g.index, set()) & set(g.candidates))
        if g.origin_class is not None:
            chosen.add(g.origin_class)
        groups.append(replace(g, candidates=sorted(chosen)))
    if sum(len(g.candidates) * len(g.roles) for g in groups) >= size:
        return None
    return replace(problem, groups=groups, pruned=True)
