"""Rebalance's greedy repair: failovers first, then moves, within the run's caps.

Failovers move no data, so they go first: each shard's master should sit on a node below the
master cap (``rules.maxMastersPerNode``, counted over every managed Redis cluster). Choosing one
master per shard among its running members, with at most the cap per node, is a bipartite
matching; the current masters are its start, and each shard left over gets the shortest chain
of failovers (breadth-first augmenting path) that frees a node for it. So one run removes every
violation of the cap that failovers alone can remove, with the fewest failovers along each chain.

Moves come second, at most ``max_moves``: first replicas that share a host with their shard or a
required rack / zone with their master; then, for a master no failover can free, a replica of
its shard onto a node without a master, so the next run can promote it (an eviction happens
after the failovers of its run, so the two cannot be one run's change).

Whatever stays gets a reason: the cap (``--max-moves`` / ``--max-failovers``), no room (no node
that accepts the pod has room for it), or the rules (nodes with room break another hard rule).
The repair is one candidate among others (solver/solve.py ranks them), never the final word.
"""

import time
from collections import Counter, defaultdict, deque
from collections.abc import Callable
from dataclasses import dataclass, field

from models.cluster import Member, Node, Role
from models.policy import Policy
from models.resources import Resources
from models.snapshot import Snapshot
from solver.greedy import greedy_placement
from solver.placement import Placement
from solver.predicates import blocking_reason, node_accepts_new_pods


@dataclass(frozen=True)
class Caps:
    """What one run may change; None is no limit."""

    max_moves: int | None = None
    max_failovers: int | None = None


@dataclass
class Repair:
    placement: Placement
    """Every member: running ones where the repair leaves them, pending ones placed by greedy."""
    failovers: int = 0
    moves: int = 0
    why: dict[str, str] = field(default_factory=dict)
    """Shard key -> why the hard violation it is part of stays after this run."""


def repair(
    snapshot: Snapshot,
    policy: Policy,
    caps: Caps,
    until: float,
    progress: Callable[[str], None] | None = None,
    pending: Placement | None = None,
) -> Repair:
    """The repair of the running placement, then greedy's placement of the pending pods; or,
    with ``pending`` (where the pending members go, as greedy placed them around the running
    cluster), the repair around them: the room and master slots they take stay theirs, so no
    pending pod is given up for a fix."""
    state = _State(snapshot, policy, pending)
    out = Repair(Placement())
    if progress:
        progress("repair: failovers")
    state.failovers(caps.max_failovers, until, out.why)
    if progress:
        progress("repair: moves")
    state.moves(caps, until, out.why)
    start = Placement(node=dict(state.node), role=dict(state.role))
    if pending is not None:
        for m in snapshot.pending:
            if m.key in pending.node:
                start.node[m.key] = pending.node[m.key]
                start.role[m.key] = pending.role.get(m.key, Role.REPLICA)
            elif m.key in pending.unplaced:
                start.unplaced[m.key] = pending.unplaced[m.key]
        out.placement = start
    elif time.monotonic() < until:
        out.placement = greedy_placement(snapshot, policy, start=start)
    else:
        out.placement = start
    out.failovers = sum(1 for s, k in state.master.items() if k != state.was_master[s])
    out.moves = len(state.moved)
    return out


class _State:
    """The running placement under repair: nodes, roles, masters per node, free room."""

    def __init__(self, snapshot: Snapshot, policy: Policy, pending: Placement | None) -> None:
        self.snapshot = snapshot
        self.nodes = snapshot.node_by_name
        self.cap = policy.rules.max_masters_per_node
        separation = policy.rules.replica_separation
        self.required = [lvl for lvl in ("rack", "zone") if separation.strength(lvl) == "required"]
        self.node: dict[str, str] = {}
        self.role: dict[str, Role] = {}
        self.load: Counter[str] = Counter()
        used: dict[str, Resources] = defaultdict(Resources)
        for pod in snapshot.other_pods:
            if pod.node_name in self.nodes:
                used[pod.node_name] = used[pod.node_name] + pod.requests
        for m in snapshot.skipped_members:
            if m.pod.node_name in self.nodes and m.role is Role.MASTER:
                self.load[m.pod.node_name] += 1  # judged by the audit, never planned
        for m in snapshot.pending if pending is not None else ():
            name = pending.node.get(m.key) if pending else None
            if name in self.nodes:
                used[name] = used[name] + m.pod.requests
                if pending and pending.role.get(m.key) is Role.MASTER:
                    self.load[name] += 1  # a pending master's slot stays its own
        for m in snapshot.members:
            name = m.pod.node_name
            if name is None:
                continue
            self.node[m.key] = name
            self.role[m.key] = m.role or Role.REPLICA
            if name in self.nodes:
                used[name] = used[name] + m.pod.requests
        self.free = {n.name: n.allocatable - used.get(n.name, Resources()) for n in snapshot.nodes}
        # Shards with exactly one running master: the ones failovers can act on.
        self.members: dict[str, list[Member]] = {}
        self.master: dict[str, str] = {}
        for key, members in snapshot.shards.items():
            running = [m for m in members if not m.pod.pending]
            masters = [m for m in running if m.role is Role.MASTER]
            if len(masters) != 1:
                continue
            self.members[key] = running
            self.master[key] = masters[0].key
        self.was_master = dict(self.master)
        for master in self.master.values():
            if self.node[master] in self.nodes:
                self.load[self.node[master]] += 1
        self.moved: set[str] = set()
        self.reserved: set[str] = set()
        self._slots: list[Node] | None = None
        """Nodes a replica was moved to so that the next run can make it master there."""

    # ------------------------------------------------------------------ failovers

    def _eligible(self, shard: str) -> list[Member]:
        """Members that may be the shard's master: running on a Ready node in the snapshot,
        not being deleted, and apart from every other member at each required level."""
        out = []
        for m in self.members[shard]:
            node = self.nodes.get(self.node[m.key])
            if node is None or not node.ready or m.pod.deleting:
                continue
            if self._apart(shard, m, node):
                out.append(m)
        return out

    def _apart(self, shard: str, master: Member, node: Node) -> bool:
        for other in self.members[shard]:
            there = self.nodes.get(self.node[other.key])
            if other is master or there is None:
                continue
            if any(there.domain(lvl) == node.domain(lvl) for lvl in self.required):
                return False
        return True

    def failovers(self, limit: int | None, until: float, why: dict[str, str]) -> None:
        """Re-seat the masters of over-full nodes by augmenting paths, within ``limit``."""
        eligible = {s: self._eligible(s) for s in self.master}
        held: dict[str, list[str]] = defaultdict(list)  # node -> shards whose master is there
        for s, k in self.master.items():
            held[self.node[k]].append(s)
        free: list[str] = []
        for name, shards in held.items():
            if len(shards) <= self.cap or name not in self.nodes:
                continue
            # Keep the shards with the fewest other places; the rest look for one.
            shards.sort(key=lambda s: (len(eligible[s]), s))
            free.extend(shards[self.cap :])
            del shards[self.cap :]
            self.load[name] = len(shards)
        count = 0
        # Nodes a failed search went through lead to no node below the cap; they stay so until
        # a chain succeeds (Kuhn's rule), so later searches skip them: without this, a cluster
        # with no free node at all costs one whole-graph search per shard.
        dead: set[str] = set()
        for shard in sorted(free):
            if time.monotonic() >= until:
                why[shard] = "the time limit: the repair ran out of time before this shard"
                self._unseat(shard, held)
                continue
            path = self._augmenting_path(shard, eligible, held, dead)
            if path is None:
                self._unseat(shard, held)
                continue
            dead.clear()
            cost = sum(
                (k != self.was_master[s]) - (self.master.get(s, k) != self.was_master[s])
                if s != shard
                else int(k != self.was_master[s])
                for s, k in path
            )
            if limit is not None and count + cost > limit:
                why[shard] = f"the cap: --max-failovers {limit} (a later run makes the failover)"
                self._unseat(shard, held)
                continue
            for s, k in path:
                old = self.master.get(s)
                if old is not None and s in held[self.node[old]]:
                    held[self.node[old]].remove(s)
                    self.load[self.node[old]] -= 1
                self.master[s] = k
                held[self.node[k]].append(s)
                self.load[self.node[k]] += 1
            count += cost
        for s, k in self.master.items():
            for m in self.members[s]:
                self.role[m.key] = Role.MASTER if m.key == k else Role.REPLICA

    def _unseat(self, shard: str, held: dict[str, list[str]]) -> None:
        """A shard no failover could re-seat keeps its master where it is (over the cap)."""
        k = self.was_master[shard]
        self.master[shard] = k
        if shard not in held[self.node[k]]:
            held[self.node[k]].append(shard)
            self.load[self.node[k]] += 1

    def _augmenting_path(
        self,
        shard: str,
        eligible: dict[str, list[Member]],
        held: dict[str, list[str]],
        dead: set[str],
    ) -> list[tuple[str, str]] | None:
        """The shortest chain (shard, new master) ending on a node below the cap, or None (and
        every node it went through added to ``dead``)."""
        self.master.pop(shard, None)
        parent: dict[str, tuple[str, str]] = {}  # node -> (shard that reached it, its member)
        came_from: dict[str, str] = {}  # shard -> node it holds (and would leave)
        queue = deque([shard])
        while queue:
            s = queue.popleft()
            for m in eligible[s]:
                name = self.node[m.key]
                if name in parent or name in dead or name == came_from.get(s):
                    continue
                parent[name] = (s, m.key)
                if self.load[name] < self.cap:
                    path: list[tuple[str, str]] = []
                    while True:
                        t, k = parent[name]
                        path.append((t, k))
                        if t == shard:
                            return path
                        name = came_from[t]
                for t in held.get(name, []):
                    if t not in came_from and t != shard:
                        came_from[t] = name
                        queue.append(t)
        dead.update(parent)
        return None

    # ------------------------------------------------------------------ moves

    def moves(self, caps: Caps, until: float, why: dict[str, str]) -> None:
        """Replicas at fault first, then replicas that let the next run free a master."""
        budget = caps.max_moves
        wanted: list[tuple[str, Member, bool]] = []  # (shard, replica, for a failover next run)
        for s in sorted(self.members):
            wanted.extend((s, m, False) for m in self._replicas_at_fault(s))
        on_node: dict[str, list[str]] = defaultdict(list)
        for s, k in self.master.items():
            on_node[self.node[k]].append(s)
        for name in sorted(self.load):
            if self.load[name] <= self.cap or name not in self.nodes:
                continue
            shards = sorted(on_node[name])
            surplus = min(len(shards), self.load[name] - self.cap)  # pending masters stay
            for s in shards[len(shards) - surplus :]:
                replicas = [
                    m
                    for m in self.members[s]
                    if self.role[m.key] is Role.REPLICA and not m.pod.deleting
                ]
                if replicas:
                    wanted.append((s, min(replicas, key=lambda m: m.key), True))
                else:
                    why.setdefault(s, "the rules: the shard has no running replica to promote")
        done = 0
        for shard, member, for_master in wanted:
            if member.key in self.moved:
                continue
            if budget is not None and done >= budget:
                why.setdefault(shard, f"the cap: --max-moves {budget} (a later run makes the move)")
                continue
            if time.monotonic() >= until:
                why.setdefault(shard, "the time limit: the repair ran out of time first")
                continue
            target, reason = self._destination(shard, member, for_master)
            if target is None:
                why.setdefault(shard, reason)
                continue
            self._move(member, target)
            done += 1
            if for_master:
                self.reserved.add(target.name)
                why.setdefault(
                    shard,
                    f"the order of changes: this run moves {member.key} to {target.name}, which "
                    "has no master, and the next run promotes it (evictions follow failovers)",
                )

    def _replicas_at_fault(self, shard: str) -> list[Member]:
        """Replicas sharing a host with another member, or a required domain with the master."""
        master = self.nodes.get(self.node[self.master[shard]])
        seen: set[str] = set()
        out = []
        for m in self.members[shard]:
            node = self.nodes.get(self.node[m.key])
            if node is None:
                continue
            if self.role[m.key] is Role.REPLICA:
                shares = node.host in seen
                if master is not None:
                    shares = shares or node.host == master.host
                    shares = shares or any(
                        node.domain(lvl) == master.domain(lvl) for lvl in self.required
                    )
                if shares and m.key not in self.moved and not m.pod.deleting:
                    out.append(m)
            seen.add(node.host)
        return out

    def _destination(self, shard: str, member: Member, for_master: bool) -> tuple[Node | None, str]:
        """The best node for the replica, or None and why none: no room, or the rules.

        The cheap tests go first (the master slot, the shard's hosts, room), so a cluster whose
        every node holds a master costs one pass over the nodes below the cap, not all of them.
        """
        master = self.nodes.get(self.node[self.master[shard]])
        hosts = {
            self.nodes[self.node[m.key]].host
            for m in self.members[shard]
            if m is not member and self.node[m.key] in self.nodes
        }
        req = member.pod.requests
        if for_master and not self.slots():
            return None, (
                "no room: every node holds as many masters as rules.maxMastersPerNode allows "
                "(pending masters placed by greedy included)"
            )
        best: tuple[tuple[int, int, int, str], Node] | None = None
        candidates = self.slots() if for_master else self.snapshot.nodes
        for node in candidates:
            if node.host in hosts or node.name == self.node[member.key]:
                continue
            if for_master and (self.load[node.name] >= self.cap or node.name in self.reserved):
                continue
            if not req.fits_in(self.free[node.name]):
                continue
            if master is not None and any(
                node.domain(lvl) == master.domain(lvl) for lvl in self.required
            ):
                continue
            if not node_accepts_new_pods(node) or blocking_reason(member.pod, node) is not None:
                continue
            if for_master and not self._apart_at(shard, member, node):
                continue
            same_zone = int(master is not None and node.zone == master.zone)
            same_rack = int(master is not None and node.rack == master.rack)
            key = (same_zone, same_rack, -self.free[node.name].memory, node.name)
            if best is None or key < best[0]:
                best = (key, node)
        if best is not None:
            return best[1], ""
        roomy = any(
            req.fits_in(self.free[n.name])
            and node_accepts_new_pods(n)
            and blocking_reason(member.pod, n) is None
            for n in self.snapshot.nodes
        )
        if not roomy:
            return None, f"no room: no node that accepts {member.key} has room for it"
        rule = "master-exclusivity" if for_master else "shard-spread"
        if self.required:
            rule += " or required replica-separation"
        return None, f"the rules: every node with room for {member.key} breaks {rule}"

    def slots(self) -> list[Node]:
        """Nodes below the master cap (a replica moved there can be promoted next run)."""
        if self._slots is None:
            self._slots = [n for n in self.snapshot.nodes if self.load[n.name] < self.cap]
        return self._slots

    def _apart_at(self, shard: str, member: Member, node: Node) -> bool:
        """``member`` on ``node`` would be apart from the rest of its shard at required levels."""
        for other in self.members[shard]:
            there = self.nodes.get(self.node[other.key])
            if other is member or there is None:
                continue
            if any(there.domain(lvl) == node.domain(lvl) for lvl in self.required):
                return False
        return True

    def _move(self, member: Member, target: Node) -> None:
        old = self.node[member.key]
        if old in self.free:
            self.free[old] = self.free[old] + member.pod.requests
        self.free[target.name] = self.free[target.name] - member.pod.requests
        self.node[member.key] = target.name
        self.moved.add(member.key)
