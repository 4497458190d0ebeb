"""The greedy baseline: one pod at a time, as a kube-scheduler plugin would place it.

Filter: fits (readiness, taints, selectors, affinity, room), no member of the same shard on the
host, the master cap, required replica separation, and with ``rules.survive`` the last member of
a shard kept out of the one domain that holds all the others and each Redis cluster's masters
kept below half per domain. Score for a replica: 100 if its master is in another zone, 70 in the
same zone but another rack, 30 in the same rack; ties go to the node with the most free memory.
A shard is placed whole or not at all (unless ``permit.allowPartialShards``).

It is the comparison point for the solver, its first hint, and the repair step that finishes
shards a level of the solver could not (``start`` holds what is decided already). Nodes are kept
in per-rack heaps by free memory so a pod looks at a handful of nodes, not all of them.
"""

import heapq
import sys
from collections import Counter, defaultdict
from collections.abc import Callable, Collection

from models.cluster import Member, Node, Role
from models.plan import Plan
from models.policy import Policy
from models.resources import Resources
from models.snapshot import Snapshot
from solver.placement import Placement, to_plan
from solver.predicates import blocking_reason, node_accepts_new_pods
from solver.volumes import VolumeSlots

NO_NODE = "greedy: no node passes the filter"


def _node_of(m: Member, start: Placement) -> str | None:
    """Where the member is in ``start``: a running member where ``start`` moves it, else where
    it runs (rebalance's repair starts greedy from a placement with moves and failovers)."""
    return start.node.get(m.key) or m.pod.node_name


def _role_of(m: Member, start: Placement) -> Role | None:
    """The member's role in ``start``; a running member's own role when ``start`` is silent."""
    if m.pod.pending:
        return start.role.get(m.key)
    return start.role.get(m.key) or m.role


def _add(used: dict[str, list[int]], name: str, requests: Resources, sign: int = 1) -> None:
    total = used.setdefault(name, [0, 0, 0])
    total[0] += sign * requests.cpu
    total[1] += sign * requests.memory
    total[2] += sign * requests.pods


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
    def __init__(self, snapshot: Snapshot, policy: Policy, start: Placement) -> None:
        self.snapshot = snapshot
        self.policy = policy
        self.cap = policy.rules.max_masters_per_node
        self.survive = policy.rules.survive
        self.masters: dict[str, int] = defaultdict(int)
        self.hosts_of_shard: dict[str, set[str]] = defaultdict(set)
        self.version: dict[str, int] = defaultdict(int)
        # Alive members per shard and masters per cluster and domain, for survive.
        self.shard_domains: dict[str, list[str | None]] = defaultdict(list)
        self.cluster_masters: dict[tuple[str, str | None], int] = defaultdict(int)
        # Masters per cluster and zone, and per cluster and rack: a master goes where its
        # cluster has the fewest (objective.md, survival and rackSurvival).
        self.spread: dict[tuple[str, str, str], int] = defaultdict(int)
        # Members per cluster and zone: a replica goes to the zone holding the fewest of its
        # cluster's members (objective.md, memberSpread).
        self.zone_members: dict[tuple[str, str], int] = defaultdict(int)
        self.rack_order: dict[str, _RackOrder] = {}
        # Bound requests summed as integers, and a node's free Resources built only when a pod
        # looks at it: per-pod model arithmetic over a large running cluster costs more than the
        # whole greedy pass. Shard hosts are only tracked for shards that have pods to place.
        nodes = snapshot.node_by_name
        used: dict[str, list[int]] = {}
        for pod in snapshot.other_pods:
            if pod.node_name in nodes:
                _add(used, pod.node_name, pod.requests)
        placing = {m.shard_key for m in snapshot.members if m.pod.node_name is None}
        self.volumes = VolumeSlots(snapshot)
        for m in snapshot.members:
            name = _node_of(m, start)
            node = nodes.get(name or "")
            if node is None:
                continue
            role = _role_of(m, start)
            _add(used, node.name, m.pod.requests)
            if m.pod.pending:
                self.volumes.take(node.name, m.pod)
            self._count(m, node, role or Role.REPLICA, placing)
        self.free = _Room(nodes, used)
        # Per zone and per rack, nodes by free memory: every node for replicas, and for masters
        # only the nodes below the master cap, so a master does not wade through every node that
        # has one. A pod looks at one heap per zone (and its master's rack), not every node.
        Heaps = dict[str, list[tuple[int, str, int]]]
        self.racks: Heaps = defaultdict(list)
        self.zones: Heaps = defaultdict(list)
        self.master_zones: Heaps = defaultdict(list)
        self.master_racks: dict[tuple[str, str], list[tuple[int, str, int]]] = defaultdict(list)
        for n in snapshot.nodes:
            if node_accepts_new_pods(n):
                total = used.get(n.name)
                entry = (-(n.allocatable.memory - (total[1] if total else 0)), n.name, 0)
                self.racks[n.rack].append(entry)
                self.zones[n.zone or ""].append(entry)
                if self.masters[n.name] < self.cap:
                    self.master_zones[n.zone or ""].append(entry)
                    self.master_racks[(n.zone or "", n.rack)].append(entry)
        for heaps in (self.racks, self.zones, self.master_zones, self.master_racks):
            for heap in heaps.values():
                heapq.heapify(heap)

    def _count(self, m: Member, node: Node, role: Role, placing: set[str], sign: int = 1) -> None:
        self.zone_members[(m.cluster, node.zone or "")] += sign
        if role is Role.MASTER:
            self.masters[node.name] += sign
            self.spread[(m.cluster, node.zone or "", "")] += sign
            rack = (m.cluster, node.zone or "", node.rack)
            self.spread[rack] += sign
            order = self.rack_order.get(m.cluster)
            if order is not None:
                order.move(node.zone or "", node.rack, self.spread[rack] - sign, self.spread[rack])
        if self.survive != "none":
            domain = node.domain(self.survive)
            if sign > 0:
                self.shard_domains[m.shard_key].append(domain)
            else:
                self.shard_domains[m.shard_key].remove(domain)
            if role is Role.MASTER:
                self.cluster_masters[(m.cluster, domain)] += sign
        if m.shard_key in placing:
            if sign > 0:
                self.hosts_of_shard[m.shard_key].add(node.host)
            else:
                self.hosts_of_shard[m.shard_key].discard(node.host)

    def best_in(
        self,
        heap: list[tuple[int, str, int]],
        member: Member,
        role: Role,
        rules: "_Rules",
        avoid_rack: str | None = None,
    ) -> Node | None:
        """The node with the most free memory in the heap that passes the filter (and is not in
        ``avoid_rack``); ties go to the first name."""
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
            if node.rack == avoid_rack:
                continue
            if self._passes(node, member, role) and rules.allows(node, member, role):
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
        if self.volumes.active and not self.volumes.room(node.name, member.pod):
            return False
        return blocking_reason(member.pod, node) is None

    def take(self, node: Node, member: Member, role: Role) -> None:
        self.free[node.name] = self.free[node.name] - member.pod.requests
        self.volumes.take(node.name, member.pod)
        self._count(member, node, role, {member.shard_key})
        self._reheap(node)

    def release(self, node: Node, member: Member, role: Role) -> None:
        self.free[node.name] = self.free[node.name] + member.pod.requests
        self.volumes.release(node.name, member.pod)
        self._count(member, node, role, {member.shard_key}, sign=-1)
        self._reheap(node, freed=True)

    def _reheap(self, node: Node, freed: bool = False) -> None:
        self.version[node.name] += 1
        entry = (-self.free[node.name].memory, node.name, self.version[node.name])
        heapq.heappush(self.racks[node.rack], entry)
        heapq.heappush(self.zones[node.zone or ""], entry)
        rack = (node.zone or "", node.rack)
        if self.masters[node.name] < self.cap:
            heapq.heappush(self.master_zones[node.zone or ""], entry)
            new = rack not in self.master_racks
            heapq.heappush(self.master_racks[rack], entry)
            if new:
                for cluster, order in self.rack_order.items():
                    order.add(*rack, self.spread[(cluster, *rack)])
                return
        if freed:  # the rack's best node may be better now: its rank is refreshed
            for order in self.rack_order.values():
                order.refresh(*rack)

    def master_top(self, rack: tuple[str, str]) -> tuple[int, str]:
        """The rack's best node for a master, as (-free memory, name); EMPTY when none."""
        heap = self.master_racks.get(rack)
        while heap and heap[0][2] != self.version[heap[0][1]]:
            heapq.heappop(heap)  # stale
        return heap[0][:2] if heap else EMPTY

    def racks_for(self, cluster: str) -> "_RackOrder":
        """The racks that take masters, by the cluster's masters there (built on first use)."""
        order = self.rack_order.get(cluster)
        if order is None:
            order = _RackOrder(self)
            for zone, rack in self.master_racks:
                order.add(zone, rack, self.spread[(cluster, zone, rack)])
            self.rack_order[cluster] = order
        return order


EMPTY = (sys.maxsize, "")
"""The rank of a rack with no node left for a master: after every rack that has one."""
Entry = tuple[tuple[int, str], int, str, str]
"""(the rack's best node when last looked at, stamp, zone, rack)."""


class _RackOrder:
    """One Redis cluster's racks for masters, grouped by zone and by its masters in each rack,
    kept as they change, each group a heap of its racks by their best node.

    A master looks at the racks of the zones holding the fewest of its cluster's masters, the
    fewest in the rack first, and among those the racks in the order of their best node, only
    until none left can beat the node found: not at every rack for every master (on 150 racks,
    ranking every rack for every master was most of greedy's time). A rack's best node only
    gets worse as nodes take pods, so a heap entry is refreshed when it surfaces; a release,
    which can make it better, and a change of count give the rack a new entry (``stamp``)."""

    def __init__(self, state: "_Cluster") -> None:
        self.state = state
        self.count: dict[tuple[str, str], int] = {}
        self.stamp: dict[tuple[str, str], int] = {}
        self.by_zone: dict[str, dict[int, list[Entry]]] = defaultdict(dict)

    def add(self, zone: str, rack: str, count: int) -> None:
        self.count[(zone, rack)] = count
        self._push(zone, rack)

    def move(self, zone: str, rack: str, before: int, after: int) -> None:
        if (zone, rack) in self.count:  # a rack that takes masters
            self.count[(zone, rack)] = after
            self._push(zone, rack)

    def refresh(self, zone: str, rack: str) -> None:
        if (zone, rack) in self.count:
            self._push(zone, rack)

    def _push(self, zone: str, rack: str) -> None:
        stamp = self.stamp.get((zone, rack), 0) + 1
        self.stamp[(zone, rack)] = stamp
        heap = self.by_zone[zone].setdefault(self.count[(zone, rack)], [])
        heapq.heappush(heap, (self.state.master_top((zone, rack)), stamp, zone, rack))

    def _clean(self, heap: list[Entry]) -> None:
        """Drop entries superseded since, and refresh the first until it is current."""
        while heap:
            seen, stamp, zone, rack = heap[0]
            if stamp != self.stamp[(zone, rack)]:
                heapq.heappop(heap)
                continue
            now = self.state.master_top((zone, rack))
            if now == seen:
                return
            heapq.heapreplace(heap, (now, stamp, zone, rack))

    def best(
        self, zone_count: Callable[[str], int], member: Member, rules: "_Rules"
    ) -> Node | None:
        """The first group's most free node that passes the filter, groups in the order of
        (the zone's masters of this cluster, the rack's)."""
        zones: dict[int, list[str]] = defaultdict(list)
        for zone in self.by_zone:
            zones[zone_count(zone)].append(zone)
        for count in sorted(zones):
            group = zones[count]
            for rack_count in sorted({c for z in group for c in self.by_zone[z]}):
                heaps = [
                    self.by_zone[z][rack_count] for z in group if rack_count in self.by_zone[z]
                ]
                node = self._most_free(heaps, member, rules)
                for z in group:
                    if not self.by_zone[z].get(rack_count, True):
                        del self.by_zone[z][rack_count]
                if node is not None:
                    return node
        return None

    def _most_free(self, heaps: list[list[Entry]], member: Member, rules: "_Rules") -> Node | None:
        """The node with the most free memory (then the first name) that passes the filter over
        these racks, each searched in the order of its best node, until none left can beat the
        node found (a rack's passing node is never better than its best)."""
        state = self.state
        taken: list[tuple[list[Entry], Entry]] = []
        found: Node | None = None
        found_key: tuple[int, str] | None = None
        while True:
            first: list[Entry] | None = None
            for heap in heaps:
                self._clean(heap)
                if heap and (first is None or heap[0] < first[0]):
                    first = heap
            if first is None or first[0][0] == EMPTY:
                break
            if found_key is not None and found_key <= first[0][0]:
                break
            entry = heapq.heappop(first)
            taken.append((first, entry))
            rack = state.master_racks[(entry[2], entry[3])]
            node = state.best_in(rack, member, Role.MASTER, rules)
            if node is not None:
                key = (-state.free[node.name].memory, node.name)
                if found_key is None or key < found_key:
                    found, found_key = node, key
        for heap, entry in taken:
            heapq.heappush(heap, entry)
        return found


class _Rules:
    """The hard rules beyond fits, spread and the cap that one pod at a time can respect."""

    def __init__(
        self, state: _Cluster, policy: Policy, masters_total: dict[str, int], spread: bool = True
    ) -> None:
        self.state = state
        self.spread = spread
        """A replica away from its master goes to the zone holding the fewest members of its
        Redis cluster (memberSpread), before the most free memory."""
        separation = policy.rules.replica_separation
        self.required = [lvl for lvl in ("rack", "zone") if separation.strength(lvl) == "required"]
        self.survive = policy.rules.survive
        self.masters_total = masters_total
        self.master_node: dict[str, Node | None] = {}
        self.remaining: dict[str, int] = {}

    def allows(self, node: Node, member: Member, role: Role) -> bool:
        shard = member.shard_key
        master = self.master_node.get(shard)
        if role is Role.REPLICA and master is not None:
            for level in self.required:
                if node.domain(level) == master.domain(level):
                    return False
        if self.survive == "none":
            return True
        domain = node.domain(self.survive)
        others = self.state.shard_domains.get(shard, [])
        if self.remaining.get(shard, 0) == 1 and (not others or set(others) == {domain}):
            return False  # the shard's last member must not share the one domain of the others
        if role is Role.MASTER:
            total = self.masters_total.get(member.cluster, 0)
            if 2 * (self.state.cluster_masters[(member.cluster, domain)] + 1) > total - 1:
                return False
        return True


def greedy_placement(
    snapshot: Snapshot,
    policy: Policy,
    start: Placement | None = None,
    shards: set[str] | None = None,
    roomiest: bool = False,
) -> Placement:
    """Place the pending members one at a time; ``start`` members stay where it puts them and
    only the shards in ``shards`` (default: every pending shard not in ``start``) are placed.

    ``roomiest``: a replica away from its master goes to the node with the most free memory,
    whatever its Redis cluster holds in that zone (memberSpread aside). Where nodes differ
    (taints, affinity, other pods), sending replicas to the zones with the fewest members
    takes room the pods placed later need: on 300 such nodes, 6 to 45 more of 915 pods were
    left out (docs/benchmarks.md). The caller weighs the two."""
    start = start or Placement()
    state = _Cluster(snapshot, policy, start)
    placement = Placement(node=dict(start.node), role=dict(start.role))
    partial = policy.permit.allow_partial_shards
    todo: dict[str, list[Member]] = {}
    for key, members in snapshot.shards.items():
        pending = [m for m in members if m.pod.pending and not m.pod.deleting]
        pending = [m for m in pending if m.key not in start.node]
        if pending and (shards is None or key in shards):
            todo[key] = pending
    masters_total = _masters_expected(snapshot, start, todo)
    rules = _Rules(state, policy, masters_total, spread=not roomiest)
    for key, members in snapshot.shards.items():
        running_master = next(
            (m for m in members if not m.pod.pending and _role_of(m, start) is Role.MASTER), None
        )
        node_name = _node_of(running_master, start) if running_master else None
        if node_name is None:
            node_name = next(
                (start.node[m.key] for m in members if start.role.get(m.key) is Role.MASTER), None
            )
        rules.master_node[key] = snapshot.node_by_name.get(node_name or "")
    for shard_key in sorted(todo):
        members = todo[shard_key]
        all_members = snapshot.shards[shard_key]
        has_master = any(
            (not m.pod.pending and _role_of(m, start) is Role.MASTER)
            or (m.pod.pending and m.role is Role.MASTER and m.key in start.node)
            or start.role.get(m.key) is Role.MASTER
            for m in all_members
        )
        # Masters first within each shard, so replicas can be scored against them.
        order = sorted(members, key=lambda m: (m.role is not Role.MASTER, m.role is None, m.key))
        rules.remaining[shard_key] = len(order)
        taken: list[tuple[Node, Member, Role]] = []
        for member in order:
            role = member.role
            if role is None:
                role = Role.REPLICA if has_master else Role.MASTER
            node = _choose(state, rules, member, role)
            if node is None:
                placement.unplaced[member.key] = NO_NODE
                if not partial:
                    break
                continue
            state.take(node, member, role)
            rules.remaining[shard_key] -= 1
            taken.append((node, member, role))
            if role is Role.MASTER:
                has_master = True
                rules.master_node[shard_key] = node
        if not partial and len(taken) < len(order):
            for node, member, role in taken:
                state.release(node, member, role)
            if any(r is Role.MASTER for _, _, r in taken):
                rules.master_node[shard_key] = None
            for member in order:
                placement.unplaced[member.key] = NO_NODE
            continue
        for node, member, role in taken:
            placement.node[member.key] = node.name
            placement.role[member.key] = role
    if policy.rules.survive != "none":
        # Every pending shard placed here is new, whether greedy or ``start`` placed it.
        placed_now = {m.shard_key for m in snapshot.pending if m.key in placement.node}
        _keep_majorities(snapshot, policy, placement, placed_now)
    return placement


def _masters_expected(
    snapshot: Snapshot, start: Placement, todo: dict[str, list[Member]]
) -> dict[str, int]:
    """Per Redis cluster: the masters it has once every shard to place is placed."""
    totals: Counter[str] = Counter()
    for key, members in snapshot.shards.items():
        has = any(
            (not m.pod.pending and _role_of(m, start) is Role.MASTER)
            or start.role.get(m.key) is Role.MASTER
            for m in members
        )
        if has or key in todo:
            totals[members[0].cluster] += 1
    return dict(totals)


def _keep_majorities(
    snapshot: Snapshot, policy: Policy, placement: Placement, placed_now: set[str]
) -> None:
    """Shards left out shrink a cluster's master count; drop newly placed shards until every
    domain again holds less than half of each cluster's masters.

    The masters are counted once and kept up to date as shards drop: counting them all again
    for each drop took 17 s where 100 shards of 150 Redis clusters had to go (survive: rack,
    15,000 nodes)."""
    level = policy.rules.survive
    nodes = snapshot.node_by_name
    placed_now = set(placed_now)

    def masters_of(key: str) -> list[tuple[str, str | None, bool]]:
        # An entry is "new" only when the master itself is a pending member placed here: only
        # then does dropping the shard's pending members take it away.
        out = []
        for m in snapshot.shards[key]:
            node = nodes.get(_node_of(m, placement) or "")
            if _role_of(m, placement) is Role.MASTER and node is not None:
                out.append((m.cluster, node.domain(level), m.pod.pending and key in placed_now))
        return out

    per_domain: dict[str, Counter[str | None]] = defaultdict(Counter)
    """Per cluster (in the order first met), its masters per domain."""
    new_in: dict[tuple[str, str | None], set[str]] = defaultdict(set)
    entries: dict[str, list[tuple[str, str | None, bool]]] = {}

    def count(key: str, sign: int) -> None:
        for cluster, domain, new in entries[key]:
            per_domain[cluster][domain] += sign
            if new and sign > 0:
                new_in[(cluster, domain)].add(key)
            elif new:
                new_in[(cluster, domain)].discard(key)

    for key in snapshot.shards:
        entries[key] = masters_of(key)
        count(key, 1)

    def breaks(cluster: str) -> tuple[str | None] | None:
        """(the domain,) holding half or more of the cluster's masters with a new one in it."""
        counts = +per_domain[cluster]
        if not counts:
            return None
        domain, most = max(counts.items(), key=lambda kv: (kv[1], str(kv[0])))
        if 2 * most > sum(counts.values()) - 1 and new_in.get((cluster, domain)):
            return (domain,)
        return None

    verdicts = {cluster: breaks(cluster) for cluster in per_domain}
    while True:
        worst = next(((c, v[0]) for c, v in verdicts.items() if v is not None), None)
        if worst is None:
            return
        cluster, domain = worst
        victim = max(new_in[(cluster, domain)])
        placed_now.discard(victim)
        for m in snapshot.shards[victim]:
            if m.pod.pending:
                placement.node.pop(m.key, None)
                placement.role.pop(m.key, None)
                placement.unplaced[m.key] = (
                    f"greedy: placing shard {victim} would leave {level} {domain} with half or "
                    f"more of {cluster}'s masters"
                )
        count(victim, -1)
        entries[victim] = masters_of(victim)
        count(victim, 1)
        for changed in {cluster, *(c for c, _, _ in entries[victim])}:
            verdicts[changed] = breaks(changed)


def _choose(state: _Cluster, rules: _Rules, member: Member, role: Role) -> Node | None:
    """The filter's best node: for a master the zone, then the rack, holding the fewest masters
    of its Redis cluster; for a replica another zone than its master's (score 100), else its
    master's zone but another rack (70), else its rack (30); a replica away from its master
    goes to the zone holding the fewest members of its Redis cluster; within a score the most
    free memory, then the first name."""
    master = rules.master_node.get(member.shard_key)
    if role is Role.MASTER:
        return _spread_master(state, rules, member)
    heaps = state.master_zones if role is Role.MASTER else state.zones
    if role is Role.REPLICA and master is not None:
        away = [h for zone, h in heaps.items() if zone != (master.zone or "")]
        nodes = [state.best_in(h, member, role, rules) for h in away]
        node = _fewest_members(state, member, nodes) if rules.spread else _most_free(state, nodes)
        if node is None:
            home = heaps.get(master.zone or "", [])
            node = state.best_in(home, member, role, rules, avoid_rack=master.rack)
        if node is None:
            node = state.best_in(state.racks.get(master.rack, []), member, role, rules)
        return node
    return _most_free(state, [state.best_in(h, member, role, rules) for h in heaps.values()])


def _spread_master(state: _Cluster, rules: _Rules, member: Member) -> Node | None:
    """A master's node: racks in order of (its cluster's masters in the zone, in the rack), the
    most free memory among the racks of the first such count where one passes the filter."""
    spread, cluster = state.spread, member.cluster
    order = state.racks_for(cluster)
    return order.best(lambda zone: spread[(cluster, zone, "")], member, rules)


def _most_free(state: _Cluster, nodes: list[Node | None]) -> Node | None:
    found = [n for n in nodes if n is not None]
    return min(found, key=lambda n: (-state.free[n.name].memory, n.name), default=None)


def _fewest_members(state: _Cluster, member: Member, nodes: list[Node | None]) -> Node | None:
    """The zone holding the fewest members of the member's Redis cluster, then the most free."""
    found = [n for n in nodes if n is not None]
    count = state.zone_members
    return min(
        found,
        key=lambda n: (count[(member.cluster, n.zone or "")], -state.free[n.name].memory, n.name),
        default=None,
    )


def greedy_most_placed(
    snapshot: Snapshot,
    policy: Policy,
    start: Placement | None = None,
    shards: set[str] | None = None,
    unplaceable: Collection[str] = (),
    again: Callable[[], bool] = lambda: True,
) -> Placement:
    """Greedy's placement; where it leaves out pods of shards not ``unplaceable`` and ``again``
    says a second pass still fits, its roomiest pass's instead when that places more."""
    first = greedy_placement(snapshot, policy, start=start, shards=shards)
    left_out = any(
        m.key not in first.node and m.shard_key not in unplaceable
        for m in snapshot.pending
        if not m.pod.deleting and (shards is None or m.shard_key in shards)
    )
    if not left_out or not again():
        return first
    roomiest = greedy_placement(snapshot, policy, start=start, shards=shards, roomiest=True)
    return roomiest if len(roomiest.node) > len(first.node) else first


def greedy_plan(snapshot: Snapshot, policy: Policy) -> Plan:
    placement = greedy_most_placed(snapshot, policy)
    status = "FEASIBLE" if not placement.unplaced else "INFEASIBLE"
    return to_plan(snapshot, placement, "place", status)  # type: ignore[arg-type]
