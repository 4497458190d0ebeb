"""Rebalance's greedy repair: failovers first, then moves, within the run's caps.

Failovers move no data, so they go first: each shard's master should sit on a node below the
master cap (``rules.maxMastersPerNode``, counted over every managed Redis cluster). Choosing one
master per shard among its running members, with at most the cap per node, is a bipartite
matching (``solver.seating``: as many shards seated as can be, with the fewest failovers). So
one run removes every violation of the cap that failovers alone can remove; a cap on failovers
takes whole chains of them, each freeing a node over the cap.

Moves come second, at most ``max_moves``: first replicas that share a host with their shard or a
required rack / zone with their master; then, for a master no failover can free, a replica of
its shard onto a node without a master, so the next run can promote it (an eviction happens
after the failovers of its run, so the two cannot be one run's change).

Whatever stays gets a reason: the cap (``--max-moves`` / ``--max-failovers``), no room (no node
that accepts the pod has room for it), or the rules (nodes with room break another hard rule).
The repair is one candidate among others (solver/solve.py ranks them), never the final word.
"""

import bisect
import time
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field

from models.cluster import Member, Node, Role
from models.policy import Policy
from models.resources import Resources
from models.snapshot import Snapshot
from solver.greedy import greedy_placement
from solver.placement import Placement
from solver.predicates import blocking_reason, node_accepts_new_pods
from solver.seating import Seat, chains, seat


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
    state.failovers(caps.max_failovers, out.why)
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
        self.by_room = sorted((-room.memory, name) for name, room in self.free.items())
        """Every node as (-free memory, name), kept sorted: ``_destination`` scans the roomiest
        first and stops at the first node it would choose, instead of judging every node."""
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
        """Nodes a replica was moved to so that the next run can make it master there."""
        self._slots: frozenset[str] | None = None

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

    def failovers(self, limit: int | None, why: dict[str, str]) -> None:
        """Re-seat the masters of over-full nodes (``solver.seating``), within ``limit``.

        Only shards whose master runs on a node of the snapshot take part; the masters they
        do not hold (pending, skipped, shards without exactly one master) keep their slots.
        Not bounded by the run's time: it is one flow, under a second on 15,000 nodes, and the
        change a run late on time should still make (it moves no data)."""
        mine = {s: k for s, k in self.master.items() if self.node[k] in self.nodes}
        current = {s: Seat(k, self.node[k]) for s, k in mine.items()}
        options = {s: [Seat(m.key, self.node[m.key]) for m in self._eligible(s)] for s in mine}
        held = Counter(now.node for now in current.values())
        room = {n: self.cap - (self.load[n] - held[n]) for n in self.nodes}
        chosen = seat(options, current, room)
        count = 0
        for chain in chains(current, chosen, self.load, self.cap):
            if limit is not None and count + len(chain) > limit:
                why[chain[0]] = f"the cap: --max-failovers {limit} (a later run makes the failover)"
                continue
            for s in chain:
                self.load[self.node[self.master[s]]] -= 1
                self.master[s] = chosen[s].member
                self.load[chosen[s].node] += 1
            count += len(chain)
        for s, k in self.master.items():
            for m in self.members[s]:
                self.role[m.key] = Role.MASTER if m.key == k else Role.REPLICA

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

        Best is another zone than the master's, then another rack, then the most free memory,
        then the name. The nodes are scanned roomiest first, so the first one allowed in each
        (same zone, same rack) class is that class's best, and the first allowed in another
        zone and rack ends the scan: on 15,000 nodes a move then judges a handful of nodes,
        not all of them (a full scan per move took 13 s for 250 moves). The cheap tests go
        first (the master slot, the shard's hosts, room).
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
        slots = self.slots() if for_master else None
        best: dict[tuple[int, int], Node] = {}
        for _, name in self.by_room:
            if slots is not None and name not in slots:
                continue
            node = self.nodes[name]
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
            best.setdefault((same_zone, same_rack), node)
            if (same_zone, same_rack) == (0, 0):
                break
        if best:
            return best[min(best)], ""
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

    def slots(self) -> frozenset[str]:
        """Nodes below the master cap (a replica moved there can be promoted next run), as they
        were at the first move that asked: named once, not once per move."""
        if self._slots is None:
            self._slots = frozenset(
                n.name for n in self.snapshot.nodes if self.load[n.name] < self.cap
            )
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
            self._set_free(old, self.free[old] + member.pod.requests)
        self._set_free(target.name, self.free[target.name] - member.pod.requests)
        self.node[member.key] = target.name
        self.moved.add(member.key)

    def _set_free(self, name: str, room: Resources) -> None:
        """A node's free room changed: ``by_room`` keeps its order."""
        del self.by_room[bisect.bisect_left(self.by_room, (-self.free[name].memory, name))]
        bisect.insort(self.by_room, (-room.memory, name))
        self.free[name] = room
