"""Level three: inside each rack, which node takes each member.

What is left at this level is a packing: distinct hosts per shard, the master cap, cpu, memory and
pod room, the fewest stacked masters and the lowest memory utilisation. Members go one at a time,
masters and the largest first, each to the node its arrival leaves least utilised. For members of
one size that is the classic earliest-finish rule, optimal for the highest utilisation; the
racks' shares come from tables that count exactly these nodes, so a share always packs when its
members are of one kind. A member that finds no node is reported, and its shard is repaired
above this level.
"""

import functools
import heapq
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


def _rack_rank(
    use: NodeUse,
    arrival: Arrival,
    heap_for: Callable[[int, bool, tuple[str, str]], list[tuple[int, int, str, int, int]]],
    top: Callable[[list[tuple[int, int, str, int, int]]], tuple[int, int, str]],
    rack: tuple[str, str],
) -> tuple[int, tuple[int, int, str]]:
    """A rack's rank for a master: its Redis cluster's masters there, then its best node."""
    return (
        use.rack_masters[(arrival.member.cluster, *rack)],
        top(heap_for(arrival.kind, True, rack)),
    )


def pack(
    use: NodeUse, nodes: list[int], arrivals: list[Arrival]
) -> tuple[dict[str, int], list[Arrival]]:
    """Place the arrivals on ``nodes``; returns (pod key -> room index, the ones that found none).

    When ``nodes`` span several racks (a zone packed whole, level two skipped), a master goes to
    the rack holding the fewest masters of its Redis cluster, then to that rack's best node: the
    rack term of the objective, which reaches ceil(masters / racks) wherever the racks have room.
    """
    rooms = use.rooms
    placed: dict[str, int] = {}
    failed: list[Arrival] = []
    Entry = tuple[int, int, str, int, int]
    """(has a master already, utilisation after the arrival, node name, version, room index)."""
    HeapKey = tuple[int, bool, tuple[str, str] | None]
    """(kind, master, (zone, rack) or None for every rack of ``nodes``)."""
    heaps: dict[HeapKey, list[Entry]] = {}
    version: dict[int, int] = defaultdict(int)
    in_rack: dict[tuple[str, str], list[int]] = defaultdict(list)
    for i in nodes:
        in_rack[(rooms.nodes[i].node.zone or "", rooms.nodes[i].rack)].append(i)
    racks = sorted(in_rack)
    by_rack = len(racks) > 1

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
        return h

    def top(heap: list[Entry]) -> tuple[int, int, str]:
        while heap and heap[0][3] != version[heap[0][-1]]:
            heapq.heappop(heap)  # stale: the node took a member since
        return heap[0][:3] if heap else (2, 0, "")

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

    for arrival in sorted(arrivals, key=lambda a: _order(a, rooms)):
        kind = rooms.kinds[arrival.kind]
        master = arrival.role is Role.MASTER
        chosen: NodeRoom | None = None
        if master and by_rack:
            rank = functools.partial(_rack_rank, use, arrival, heap_for, top)

            # The first rack in that order mostly takes it: the others are ranked only if not.
            first = min(racks, key=rank)
            chosen = best(heap_for(arrival.kind, True, first), arrival, kind, master)
            if chosen is None:
                for rack in sorted(racks, key=rank):
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
        for (k, is_master, rack), h in heaps.items():
            if (
                k in chosen.eligible
                and (rack is None or rack == (chosen.node.zone or "", chosen.rack))
                and (not is_master or use.master_room(chosen))
            ):
                heapq.heappush(h, make_entry(chosen, k, is_master))
    return placed, failed
