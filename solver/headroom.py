"""Headroom: the most additional shards of one shape that fit with every hard rule kept.

Capacity alone gives upper bounds, each valid on its own: per resource (memory, cpu, pod slots)
with the members of a shard on distinct hosts and, under ``survive``, at most ``size - 1`` of
them in any one domain; master slots (``maxMastersPerNode`` minus the masters running); under
``survive``, a strict master majority outside every domain. The smallest, ``U``, is the number
of candidate shards given to the solver, once, as pending members (``solver.solve.solve``). A
plan that places all ``U`` is proven by the bound; an OPTIMAL plan proves that no more fit (the
solver says OPTIMAL only when no placement places more pods); otherwise the plan's
``unplacedBound`` (pods any plan must leave out) gives the bound, and the answer is OPTIMAL
when that bound is met, FEASIBLE with it when not.

What binds first is the smallest bound when the solver reaches it; when the rules together
stop it earlier, the resources left with no room for one more member after the plan, per zone.
When not one shard fits, the most basic reason instead (``why_none_fits``): no node accepts its
pods at all, too few hosts for its members, a resource no node has room for. A resource the
shape does not request bounds nothing (its bound's ``shards`` is None).
"""

from collections import Counter, defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from models.cluster import Member, Node, Pod, Role
from models.headroom import CapacityBound, Headroom, ShardShape
from models.plan import Plan, Status
from models.policy import Level, Policy
from models.resources import Resources
from models.snapshot import Snapshot
from models.words import plural, verb
from solver.check import check_plan, keep_plan
from solver.predicates import blocking_reason, node_accepts_new_pods, nodes_available
from solver.solve import SolveOptions, solve

MAX_CANDIDATES = 1000
"""At most this many candidate shards go into one solve; a larger bound is reported as such."""
RESOURCES = ("memory", "cpu", "pods")
LABELS = {"memory": "memory", "cpu": "cpu", "pods": "pod slots"}
UNLIMITED = 1 << 40
"""A node's slots for a resource the shape does not request: internal, never reported (such a
resource bounds nothing, and its bound says so: ``CapacityBound.shards`` None)."""


@dataclass
class _Room:
    """One node that could take a member of the shape, and how many."""

    node: Node
    slots: dict[str, int]
    """Per resource (and ``all``): members of the shape that fit in what is free now."""
    master_room: int
    """New masters it may take: maxMastersPerNode minus the masters on it, within its slots."""

    @property
    def zone(self) -> str:
        return self.node.zone or ""


def template_pod(shape: ShardShape, policy: Policy, namespace: str, name: str, shard: str) -> Pod:
    cluster = shape.cluster.split("/", 1)[1]
    labels = {**policy.selector, policy.labels.cluster: cluster, policy.labels.shard: shard}
    return Pod(
        namespace=namespace,
        name=name,
        uid=f"headroom-{namespace}-{name}",
        labels=labels,
        requests=shape.requests.model_copy(update={"pods": 1}),
        tolerations=shape.tolerations,
        node_selector=shape.node_selector,
        affinity_terms=shape.affinity_terms,
        scheduler_name=policy.scheduler_name,
    )


def _used(snapshot: Snapshot, members: Sequence[Member]) -> dict[str, list[int]]:
    used: dict[str, list[int]] = defaultdict(lambda: [0, 0, 0])
    pods = [*snapshot.other_pods, *(m.pod for m in members)]
    for pod in pods:
        if pod.node_name:
            total = used[pod.node_name]
            total[0] += pod.requests.cpu
            total[1] += pod.requests.memory
            total[2] += pod.requests.pods
    return used


def _requested(need: Resources, resource: str) -> bool:
    """Whether a member asks for some of ``resource`` (a pod slot, always)."""
    return resource == "pods" or (need.memory if resource == "memory" else need.cpu) > 0


def _slots(free: tuple[int, int, int], need: Resources) -> dict[str, int]:
    """Members that fit in ``free`` (cpu, memory, pods), per resource and all together; a
    resource not requested gets ``UNLIMITED`` and takes no part in ``all``."""
    out = {}
    for name, have, want in zip(
        RESOURCES, (free[1], free[0], free[2]), (need.memory, need.cpu, 1), strict=True
    ):
        out[name] = max(0, have) // want if want > 0 else UNLIMITED
    out["all"] = min(out[name] for name in RESOURCES if _requested(need, name))
    return out


def _rooms(
    snapshot: Snapshot, policy: Policy, shape: ShardShape, members: Sequence[Member]
) -> list[_Room]:
    probe = template_pod(shape, policy, "headroom", "probe", "probe")
    used = _used(snapshot, members)
    masters = Counter(m.pod.node_name for m in members if m.role is Role.MASTER and m.pod.node_name)
    cap = policy.rules.max_masters_per_node
    rooms = []
    for node in snapshot.nodes:
        if not node_accepts_new_pods(node) or blocking_reason(probe, node) is not None:
            continue
        u = used.get(node.name, [0, 0, 0])
        a = node.allocatable
        slots = _slots((a.cpu - u[0], a.memory - u[1], a.pods - u[2]), probe.requests)
        master_room = min(slots["all"], max(0, cap - masters[node.name]))
        rooms.append(_Room(node, slots, master_room))
    return rooms


def _largest(ok: Callable[[int], bool], upper: int) -> int:
    """The largest S in [0, upper] with ok(S), for an ``ok`` that holds on an interval from 0."""
    low, high = 0, upper
    while low < high:
        mid = (low + high + 1) // 2
        if ok(mid):
            low = mid
        else:
            high = mid - 1
    return low


def _members_fit(
    rooms: Sequence[_Room], resource: str, size: int, level: Level | None
) -> tuple[int, list[str]]:
    """The most shards whose members fit on distinct hosts (and, with ``level``, at most
    ``size - 1`` in any domain of it), counting ``resource``; and the zones that bind."""
    hosts: dict[str, int] = defaultdict(int)
    domain_of: dict[str, str] = {}
    zone_of: dict[str, str] = {}
    for room in rooms:
        hosts[room.node.host] += room.slots[resource]
        domain_of[room.node.host] = room.node.domain(level) or "" if level else ""
        zone_of[room.node.host] = room.zone

    def inside(s: int) -> dict[str, int]:
        per: dict[str, int] = defaultdict(int)
        for host, slots in hosts.items():
            per[domain_of[host]] += min(slots, s)
        return per

    def ok(s: int) -> bool:
        if level is None:
            return sum(min(k, s) for k in hosts.values()) >= s * size
        if size < 2:
            return s == 0
        return sum(min(v, s * (size - 1)) for v in inside(s).values()) >= s * size

    upper = sum(hosts.values()) // size
    best = _largest(ok, upper)
    # What stops best + 1: hosts already full at best (or domains short of their share).
    nxt = best + 1
    if level is None:
        full = {zone_of[h] for h, k in hosts.items() if k < nxt}
    else:
        short = {d for d, v in inside(nxt).items() if v < nxt * (size - 1)}
        full = {zone_of[h] for h in hosts if domain_of[h] in short}
    zones = {r.zone for r in rooms}
    return best, sorted(full) if full and full != zones else []


def _majority_fits(
    rooms: Sequence[_Room],
    members: Sequence[Member],
    cluster: str,
    level: Level,
    upper: int,
    nodes: dict[str, Node],
) -> int:
    """The most new masters of ``cluster`` the survive rule allows, given master room per domain.

    Per domain D: 2 * (masters in D) <= (all masters) - 1, or no worse than now where the running
    masters already break that (as solver/rules/survive.py reads the rule).
    """
    fixed: Counter[str] = Counter()
    for m in members:
        node = nodes.get(m.pod.node_name or "")
        if m.cluster == cluster and m.role is Role.MASTER and node is not None:
            fixed[node.domain(level) or ""] += 1
    total_fixed = sum(fixed.values())
    room: Counter[str] = Counter()
    for r in rooms:
        room[r.node.domain(level) or ""] += r.master_room

    def ok(s: int) -> bool:
        if s == 0:
            return True
        total = total_fixed + s
        fit = 0
        for domain, slots in room.items():
            f = fixed[domain]
            allowed = max(-1, 2 * f - total_fixed) if total_fixed else -1
            fit += min(slots, max(0, (allowed + total) // 2 - f))
        return fit >= s

    return next((s for s in range(upper, -1, -1) if ok(s)), 0)


def capacity_bounds(
    snapshot: Snapshot, policy: Policy, shape: ShardShape, members: Sequence[Member]
) -> list[CapacityBound]:
    """Every upper bound that capacity and the rules give, smallest first."""
    rooms = _rooms(snapshot, policy, shape, members)
    survive = policy.rules.survive
    level: Level | None = None if survive == "none" else survive
    bounds = []
    if level is not None and shape.size < 2:
        # Not the resources' doing: a lone member is lost with its domain, whatever the room.
        lone = f"survive {level}: a shard of 1 member is lost with its {level}"
        bounds.append(CapacityBound(limit=lone, shards=0))
    spread = level if shape.size >= 2 else None
    for resource in (*RESOURCES, "all"):
        label = LABELS.get(resource, "cpu, memory and pod slots together")
        if resource != "all" and not _requested(shape.requests, resource):
            bounds.append(CapacityBound(limit=label, shards=None))
            continue
        shards, where = _members_fit(rooms, resource, shape.size, spread)
        with_room = {r.node.host for r in rooms if r.slots[resource] > 0}
        total = sum(min(r.slots[resource], shape.size) for r in rooms)
        if shards == 0 and total >= shape.size and len(with_room) < shape.size:
            label = f"hosts with room for a member (shard-spread: {plural(shape.size, 'host')} per shard)"
        bounds.append(CapacityBound(limit=label, shards=shards, where=where))
    cap = policy.rules.max_masters_per_node
    masters = sum(r.master_room for r in rooms)
    bounds.append(CapacityBound(limit=f"master slots (maxMastersPerNode {cap})", shards=masters))
    if level is not None:
        upper = min(b.shards for b in bounds if b.shards is not None)
        shards = _majority_fits(rooms, members, shape.cluster, level, upper, snapshot.node_by_name)
        bounds.append(CapacityBound(limit=f"survive {level}: master majority", shards=shards))
    order = {b.limit: i for i, b in enumerate(bounds)}
    return sorted(bounds, key=lambda b: (b.shards is None, b.shards or 0, order[b.limit]))


def _no_node_accepts(snapshot: Snapshot, probe: Pod) -> str:
    """Why no node takes a member at all, as kube-scheduler tallies it: no resource or host
    count is to blame when every node refuses the pod (NotReady, cordoned, tainted...)."""
    if not snapshot.nodes:
        return "no node accepts its pods: the input has no nodes"
    refused = Counter(blocking_reason(probe, n) or "node takes no new pods" for n in snapshot.nodes)
    return f"no node accepts its pods: {nodes_available(refused, len(snapshot.nodes))}"


def why_none_fits(
    snapshot: Snapshot,
    policy: Policy,
    shape: ShardShape,
    members: Sequence[Member],
    bounds: Sequence[CapacityBound],
) -> str:
    """Why not even one shard of the shape fits, the most basic reason first: no node takes its
    pods; fewer hosts take them than a shard has members; a resource no node has room for; else
    the bound that is 0 (a rule, or room that runs out on too many hosts)."""
    rooms = _rooms(snapshot, policy, shape, members)
    if not rooms:
        probe = template_pod(shape, policy, "headroom", "probe", "probe")
        return _no_node_accepts(snapshot, probe)
    hosts = len({r.node.host for r in rooms})
    if hosts < shape.size:
        return (
            f"shard-spread: a shard of {shape.size} members needs {shape.size} distinct hosts; "
            f"{plural(hosts, 'host')} {verb(hosts, 'accepts', 'accept')} its pods"
        )
    full = [LABELS[res] for res in RESOURCES if not any(r.slots[res] for r in rooms)]
    if full:
        nodes = len(rooms)
        return (
            f"{' and '.join(full)}: no node has room for one member "
            f"({plural(nodes, 'node')} {verb(nodes, 'accepts', 'accept')} its pods)"
        )
    first = bounds[0]
    return first.limit + (f" in {', '.join(first.where)}" if first.where else "")


def _free_prefix(snapshot: Snapshot, namespace: str) -> str:
    taken = {m.key for m in snapshot.members} | {p.key for p in snapshot.other_pods}
    prefix, n = "headroom", 0
    while any(k.startswith(f"{namespace}/{prefix}-") for k in taken):
        n += 1
        prefix = f"headroom{n}"
    return prefix


def candidates(snapshot: Snapshot, policy: Policy, shape: ShardShape, count: int) -> list[Member]:
    """``count`` pending shards of the shape, named so that they collide with nothing."""
    namespace = shape.cluster.split("/", 1)[0]
    prefix = _free_prefix(snapshot, namespace)
    out = []
    for i in range(count):
        shard = f"{prefix}-{i}"
        for j in range(shape.size):
            pod = template_pod(shape, policy, namespace, f"{shard}-{j}", shard)
            out.append(
                Member(
                    pod=pod, cluster=shape.cluster, shard=shard, role=None, shard_size=shape.size
                )
            )
    return out


def _rules_in_conflict(explanation: Sequence[str]) -> list[str]:
    """The rule names of the solver's unsatisfiable core ("...; these rules conflict: a (x); b")."""
    names: list[str] = []
    for line in explanation:
        _, sep, rules = line.partition("these rules conflict: ")
        for rule in rules.split("; ") if sep else ():
            name = rule.split(" (", 1)[0].strip()
            if name and name not in names:
                names.append(name)
    return names


def _exhausted(
    snapshot: Snapshot,
    policy: Policy,
    shape: ShardShape,
    members: Sequence[Member],
    explanation: Sequence[str] = (),
) -> str:
    """After the plan: the resources with no room for one more member, per zone; else the
    rules the solver found in conflict."""
    rooms_now = {r.node.name: r for r in _rooms(snapshot, policy, shape, members)}
    by_zone: dict[str, set[str]] = {}
    for node in snapshot.nodes:
        if node.zone is None or not node_accepts_new_pods(node):
            continue
        by_zone.setdefault(node.zone, set())
    short: dict[str, list[str]] = {}
    for zone in sorted(by_zone):
        here = [r for r in rooms_now.values() if r.zone == zone]
        gone = [LABELS[res] for res in RESOURCES if sum(r.slots[res] for r in here) == 0]
        if gone:
            short[zone] = gone
    if short:
        return "; ".join(f"{' and '.join(g)} in {z}" for z, g in short.items())
    if not any(r.master_room for r in rooms_now.values()):
        return f"master slots (maxMastersPerNode {policy.rules.max_masters_per_node})"
    rules = _rules_in_conflict(explanation)
    if rules:
        return "the rules together: " + ", ".join(rules)
    survive = policy.rules.survive
    if survive != "none":
        return f"survive {survive}: a member and a strict master majority outside every {survive}"
    return "shard-spread: the members of a shard on distinct hosts, with the room left"


def _broken(plan: Plan, base: Snapshot, policy: Policy, new: Sequence[Member]) -> set[str]:
    """Candidate pods in a hard violation of the plan. A survive violation of a Redis cluster
    that the running pods already break is the running pods' doing (the rule then asks for no
    worse than now), not the candidates'."""
    members = {m.key: m for m in base.members}
    already = {
        members[p].cluster
        for v in check_plan(base, policy, keep_plan(base))
        if v.rule == "survive" and v.severity == "hard"
        for p in v.pods
        if p in members
    }
    keys = {m.key for m in new}
    cluster_of = {m.key: m.cluster for m in new} | {k: m.cluster for k, m in members.items()}
    broken: set[str] = set()
    for v in plan.hard_violations:
        clusters = {cluster_of[p] for p in v.pods if p in cluster_of}
        if v.rule == "survive" and clusters and clusters <= already:
            continue
        broken |= keys & set(v.pods)
    return broken


def _placed_shards(plan: Plan, new: Sequence[Member], broken: set[str]) -> int:
    unplaced = {u.pod for u in plan.unplaced}
    node_of = {a.pod: a.node for a in plan.assignments}
    shards: dict[str, bool] = {}
    for m in new:
        ok = bool(node_of.get(m.key)) and m.key not in unplaced and m.key not in broken
        shards[m.shard] = shards.get(m.shard, True) and ok
    return sum(shards.values())


def headroom(
    snapshot: Snapshot,
    policy: Policy,
    shape: ShardShape,
    options: SolveOptions | None = None,
) -> Headroom:
    """The most additional shards of ``shape`` that fit, with its proof and what binds first.

    Pending pods of ``snapshot`` are left out (listed in ``pending_ignored``): the answer is
    counted on top of what runs. The policy's degradation is off and shards are whole: every
    hard rule holds, as written.
    """
    running = [m for m in snapshot.members if not m.pod.pending]
    base = snapshot.model_copy(update={"members": tuple(running)})
    strict = policy.model_copy(
        update={
            "degradation": policy.degradation.model_copy(update={"relax_when_infeasible": False}),
            "permit": policy.permit.model_copy(update={"allow_partial_shards": False}),
        }
    )
    bounds = capacity_bounds(base, strict, shape, running)
    upper = bounds[0].shards or 0  # never None: a member always takes a pod slot
    common = {
        "cluster": shape.cluster,
        "shard_size": shape.size,
        "cpu_millis": shape.requests.cpu,
        "memory_bytes": shape.requests.memory,
        "bounds": bounds,
        "pending_ignored": sorted(m.key for m in snapshot.members if m.pod.pending),
    }
    first = bounds[0].limit + (f" in {', '.join(bounds[0].where)}" if bounds[0].where else "")
    if upper == 0:
        none = why_none_fits(base, strict, shape, running, bounds)
        return Headroom(shards=0, status="OPTIMAL", bound=0, limited_by=none, **common)
    count = min(upper, MAX_CANDIDATES)
    new = candidates(base, strict, shape, count)
    trial = base.model_copy(update={"members": (*running, *new)})
    plan = solve(trial, strict, "place", options or SolveOptions())
    broken = _broken(plan, base, strict, new)
    placed = _placed_shards(plan, new, broken)
    keys = {m.key for m in new}
    why = list(
        dict.fromkeys([*plan.explanation, *(u.reason for u in plan.unplaced if u.pod in keys)])
    )
    # The solver proves how few pending pods any plan must leave unplaced: the shards beyond
    # what the rest allows cannot fit. With all candidates placed, only the bound speaks.
    if placed < count:
        known = plan.unplaced_bound if plan.unplaced_bound is not None else 0
        proven = (count * shape.size - known) // shape.size
        trusted = plan.status == "OPTIMAL" and not broken
        bound = placed if trusted else max(placed, min(upper, proven))
    else:
        bound = upper
    status: Status = "OPTIMAL" if bound == placed else "FEASIBLE"
    after = [*running, *_placed_members(plan, new)]
    # All candidates placed: the smallest bound is what binds (reached, or not yet tried).
    limited = first if placed == count else _exhausted(trial, strict, shape, after, why)
    note = ""
    if status == "FEASIBLE":
        note = (
            f"{count} candidate shards were tried (at most {MAX_CANDIDATES})"
            if placed == count
            else f"the solver stopped ({plan.status}) without proving that no more fit"
        )
    return Headroom(
        shards=placed,
        status=status,
        bound=bound,
        limited_by=limited,
        candidates=count,
        solve_seconds=plan.solve_seconds,
        note=note,
        explanation=why if placed < count else [],
        **common,
    )


def _placed_members(plan: Plan, new: Sequence[Member]) -> list[Member]:
    """The candidate members as the plan placed them (with their node and role)."""
    unplaced = {u.pod for u in plan.unplaced}
    by_pod = {a.pod: a for a in plan.assignments}
    out = []
    for m in new:
        a = by_pod.get(m.key)
        if a is None or not a.node or m.key in unplaced:
            continue
        out.append(
            m.model_copy(
                update={
                    "pod": m.pod.model_copy(update={"node_name": a.node}),
                    "role": Role(a.role),
                }
            )
        )
    return out
