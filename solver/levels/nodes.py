"""Level three: inside each rack, which node takes each member.

What is left at this level is a packing: distinct hosts per shard, the master cap, cpu, memory and
pod room, the fewest stacked masters and the lowest memory utilisation. Members go one at a time,
masters and the largest first, each to the node its arrival leaves least utilised. For members of
one size that is the classic earliest-finish rule, optimal for the highest utilisation; the
racks' shares come from tables that count exactly these nodes, so a share always packs when its
members are of one kind. A member that finds no node is reported, and its shard is repaired
above this level.
"""

import heapq
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field

from models.cluster import Member, Role
from solver.levels.rooms import CPU, MEMORY, PODS, Kind, NodeRoom, Rooms
from solver.volumes import VolumeSlots


@dataclass
class NodeUse:
    """What the levels have put on the nodes so far, shared by every rack."""

    rooms: Rooms
    taken: dict[int, list[int]] = field(default_factory=lambda: defaultdict(lambda: [0, 0, 0]))
    masters: dict[int, int] = field(default_factory=lambda: defaultdict(int))
    shard_hosts: dict[str, set[str]] = field(default_factory=lambda: defaultdict(set))
    hosting: set[int] = field(default_factory=set)
    host_master_cap: dict[str, int] = field(default_factory=dict)
    """With survive: host, per Redis cluster: the most of its masters one host may hold."""
    host_masters: dict[tuple[str, str], int] = field(default_factory=lambda: defaultdict(int))
    rack_masters: dict[tuple[str, str, str], int] = field(default_factory=lambda: defaultdict(int))
    """Per (Redis cluster, zone, rack): its masters there, those that stay and those placed so
    far (a rack lies inside its zone: the same rack label in two zones is two racks)."""
    volumes: VolumeSlots = field(default_factory=VolumeSlots)
    """Free local PVs per node, as the members placed so far leave them."""

    def util_after(self, room: NodeRoom, kind: Kind) -> int:
        return room.utilisation(self.taken[room.index][MEMORY] + kind.requests[MEMORY])

    def fits(self, room: NodeRoom, kind: Kind) -> bool:
        used, req, free = self.taken[room.index], kind.requests, room.free
        return (
            used[CPU] + req[CPU] <= free[CPU]
            and used[MEMORY] + req[MEMORY] <= free[MEMORY]
            and used[PODS] + req[PODS] <= free[PODS]
            and (not self.volumes.active or self.volumes.room(room.node.name, kind.pod))
        )

    def master_room(self, room: NodeRoom) -> bool:
        return room.masters + self.masters[room.index] < self.rooms.cap

    def host_allows_master(self, room: NodeRoom, cluster: str) -> bool:
        cap = self.host_master_cap.get(cluster)
        return cap is None or self.host_masters[(cluster, room.host)] < cap

    def take(self, room: NodeRoom, member: Member, kind: Kind, role: Role) -> None:
        used = self.taken[room.index]
        for r in (CPU, MEMORY, PODS):
            used[r] += kind.requests[r]
        self.volumes.take(room.node.name, member.pod)
        if role is Role.MASTER:
            self.masters[room.index] += 1
            self.host_masters[(member.cluster, room.host)] += 1
            self.rack_masters[(member.cluster, room.node.zone or "", room.rack)] += 1
        self.shard_hosts[member.shard_key].add(room.host)
        self.hosting.add(room.index)

    def release(self, room: NodeRoom, member: Member, kind: Kind, role: Role) -> None:
        used = self.taken[room.index]
        for r in (CPU, MEMORY, PODS):
            used[r] -= kind.requests[r]
        self.volumes.release(room.node.name, member.pod)
        if role is Role.MASTER:
            self.masters[room.index] -= 1
            self.host_masters[(member.cluster, room.host)] -= 1
            self.rack_masters[(member.cluster, room.node.zone or "", room.rack)] -= 1
        self.shard_hosts[member.shard_key].discard(room.host)


@dataclass(frozen=True)
class Arrival:
    member: Member
    kind: int
    role: Role


def _order(a: Arrival, rooms: Rooms) -> tuple[int, int, str]:
    return (a.role is not Role.MASTER, -rooms.kinds[a.kind].requests[MEMORY], a.member.key)


CLOCK_EVERY = 256
"""Arrivals packed between two looks at the clock."""

Entry = tuple[int, int, str, int, int]
"""(has a master already, utilisation after the arrival, node name, version, room index)."""
Top = tuple[int, int, str]
"""A heap's best entry without its bookkeeping; (2, 0, "") when the heap is empty."""
EMPTY: Top = (2, 0, "")


class _RackQueue:
    """One Redis cluster's racks for masters of one kind, in the order a master ranks them:
    the cluster's masters in the rack, then the rack's best node (its heap's top).

    A heap per master count, of (top, rack) as last seen: a node's entry only grows as it takes
    members, so a rack's top never improves, and an entry whose top has grown is pushed back
    with its new top when it surfaces. A master then looks at a handful of racks, not at every
    rack of the zone (on 50 racks a zone, ranking all of them for each of 5,000 masters was
    most of the packing)."""

    def __init__(
        self,
        racks: list[tuple[str, str]],
        count: Callable[[tuple[str, str]], int],
        top: Callable[[tuple[str, str]], Top],
    ) -> None:
        self.count, self.top = count, top
        self.levels: dict[int, list[tuple[Top, tuple[str, str]]]] = defaultdict(list)
        for rack in racks:
            self.levels[count(rack)].append((top(rack), rack))
        for heap in self.levels.values():
            heapq.heapify(heap)

    def moved(self, rack: tuple[str, str]) -> None:
        """The rack took a master of this cluster: it ranks at its new count (its entry at the
        old count is dropped when it surfaces)."""
        heapq.heappush(self.levels[self.count(rack)], (self.top(rack), rack))

    def first(self) -> tuple[str, str] | None:
        """The rack ranked first whose heap holds a node (None when none does)."""
        for level in sorted(self.levels):
            heap = self.levels[level]
            while heap:
                seen, rack = heap[0]
                if self.count(rack) != level:
                    heapq.heappop(heap)  # it has moved up a count since
                    continue
                now = self.top(rack)
                if now != seen:
                    heapq.heapreplace(heap, (now, rack))
                    continue
                if now == EMPTY:
                    heap.clear()  # the best of the level is empty: so is every rack in it
                    break
                return rack
            del self.levels[level]
        return None


def pack(
    use: NodeUse, nodes: list[int], arrivals: list[Arrival], until: float | None = None
) -> tuple[dict[str, int], list[Arrival]]:
    """Place the arrivals on ``nodes``; returns (pod key -> room index, the ones that found none).
    Past ``until`` (time.monotonic()) the arrivals not yet placed are returned as finding none.

    When ``nodes`` span several racks (a zone packed whole, level two skipped), a master goes to
    the rack holding the fewest masters of its Redis cluster, then to that rack's best node: the
    rack term of the objective, which reaches ceil(masters / racks) wherever the racks have room.
    """
    rooms = use.rooms
    placed: dict[str, int] = {}
    failed: list[Arrival] = []
    HeapKey = tuple[int, bool, tuple[str, str] | None]
    """(kind, master, (zone, rack) or None for every rack of ``nodes``)."""
    heaps: dict[HeapKey, list[Entry]] = {}
    touching: dict[tuple[str, str], list[HeapKey]] = defaultdict(list)
    """The heaps a node of the rack sits in (those of every rack included)."""
    version: dict[int, int] = defaultdict(int)
    in_rack: dict[tuple[str, str], list[int]] = defaultdict(list)
    for i in nodes:
        in_rack[(rooms.nodes[i].node.zone or "", rooms.nodes[i].rack)].append(i)
    racks = sorted(in_rack)
    by_rack = len(racks) > 1
    queues: dict[tuple[str, int], _RackQueue] = {}

    def make_entry(room: NodeRoom, kind: int, master: bool) -> Entry:
        stacked = 1 if master and room.masters + use.masters[room.index] > 0 else 0
        util = use.util_after(room, rooms.kinds[kind])
        return (stacked, util, room.node.name, version[room.index], room.index)

    def heap_for(kind: int, master: bool, rack: tuple[str, str] | None = None) -> list[Entry]:
        h = heaps.get((kind, master, rack))
        if h is None:
            h = [
                make_entry(rooms.nodes[i], kind, master)
                for i in (nodes if rack is None else in_rack[rack])
                if kind in rooms.nodes[i].eligible
                and (not master or use.master_room(rooms.nodes[i]))
            ]
            heapq.heapify(h)
            heaps[(kind, master, rack)] = h
            for r in racks if rack is None else [rack]:
                touching[r].append((kind, master, rack))
        return h

    def top(heap: list[Entry]) -> Top:
        while heap and heap[0][3] != version[heap[0][-1]]:
            heapq.heappop(heap)  # stale: the node took a member since
        return heap[0][:3] if heap else EMPTY

    def queue_for(arrival: Arrival) -> _RackQueue:
        cluster, kind = arrival.member.cluster, arrival.kind
        q = queues.get((cluster, kind))
        if q is None:
            q = _RackQueue(
                racks,
                lambda rack: use.rack_masters[(cluster, *rack)],
                lambda rack: top(heap_for(kind, True, rack)),
            )
            queues[(cluster, kind)] = q
        return q

    def best(heap: list[Entry], arrival: Arrival, kind: Kind, master: bool) -> NodeRoom | None:
        hosts = use.shard_hosts[arrival.member.shard_key]
        skipped: list[Entry] = []
        chosen: NodeRoom | None = None
        while heap:
            entry = heapq.heappop(heap)
            i = entry[-1]
            if entry[3] != version[i]:
                continue  # stale: the node took a member since
            room = rooms.nodes[i]
            if (master and not use.master_room(room)) or not use.fits(room, kind):
                continue  # nodes only fill up here: it never takes this kind again
            if room.host in hosts or (
                master and not use.host_allows_master(room, arrival.member.cluster)
            ):
                skipped.append(entry)  # this shard or cluster is there already; others may go
                continue
            chosen = room
            break
        for entry in skipped:
            heapq.heappush(heap, entry)
        return chosen

    def rank(arrival: Arrival, rack: tuple[str, str]) -> tuple[int, Top]:
        """A rack's rank for a master: its Redis cluster's masters there, then its best node."""
        return (
            use.rack_masters[(arrival.member.cluster, *rack)],
            top(heap_for(arrival.kind, True, rack)),
        )

    ordered = sorted(arrivals, key=lambda a: _order(a, rooms))
    for n, arrival in enumerate(ordered):
        if until is not None and n % CLOCK_EVERY == 0 and time.monotonic() > until:
            failed.extend(ordered[n:])
            break
        kind = rooms.kinds[arrival.kind]
        master = arrival.role is Role.MASTER
        chosen: NodeRoom | None = None
        if master and by_rack:
            # The first rack in that order mostly takes it: the others are ranked only if not.
            first = queue_for(arrival).first()
            if first is not None:
                chosen = best(heap_for(arrival.kind, True, first), arrival, kind, master)
            if chosen is None:
                for rack in sorted(racks, key=lambda r: rank(arrival, r)):
                    if rack == first:
                        continue
                    chosen = best(heap_for(arrival.kind, True, rack), arrival, kind, master)
                    if chosen is not None:
                        break
        else:
            chosen = best(heap_for(arrival.kind, master), arrival, kind, master)
        if chosen is None:
            failed.append(arrival)
            continue
        use.take(chosen, arrival.member, kind, arrival.role)
        placed[arrival.member.key] = chosen.index
        version[chosen.index] += 1
        where = (chosen.node.zone or "", chosen.rack)
        for k, is_master, rack in touching[where]:
            if k in chosen.eligible and (not is_master or use.master_room(chosen)):
                heapq.heappush(heaps[(k, is_master, rack)], make_entry(chosen, k, is_master))
        if master and by_rack:
            for (cluster, _), other in queues.items():
                if cluster == arrival.member.cluster:
                    other.moved(where)
    return placed, failed
