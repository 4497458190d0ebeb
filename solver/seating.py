"""Which member of each shard is its master: as many shards seated under the master cap as
can be, with the fewest failovers.

Choosing one master per shard with at most ``room`` masters per node is a bipartite matching.
As a flow (source -> shard -> node -> sink; a shard's arc to its current master's node costs 0,
to another member's node 1), OR-tools' min-cost max-flow gives the largest seating and, among
those, the fewest failovers, in one call. On 15,000 nodes after a zone's return (15,000 masters,
every node needed once) it takes a fraction of a second where augmenting paths searched one
shard at a time in Python ran out of a 20 s budget with 1,000 shards left.

A run may cap its failovers, so the changes come back as chains: each starts with a shard
leaving a node over the cap and ends on a node with room, every node in between losing one
master as it gains one. A chain is applied whole or not at all, so whatever prefix of the
chains a cap allows leaves no node worse than it was.
"""

from collections import defaultdict, deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from ortools.graph.python import min_cost_flow


@dataclass(frozen=True)
class Seat:
    """A member that may be its shard's master, and the node it runs on."""

    member: str
    node: str


def seat(
    options: Mapping[str, Sequence[Seat]],
    current: Mapping[str, Seat],
    room: Mapping[str, int],
) -> dict[str, Seat]:
    """Each shard's master: the largest number of shards seated, then the fewest changed.

    ``options``: the members that may become master (the current one is always allowed where
    its node has room); ``room``: master slots per node for these shards. Shards left out of
    the answer could not be seated: they keep their master, over the cap."""
    shards = sorted(options.keys() | current.keys())
    nodes = sorted(room)
    shard_index = {s: 1 + i for i, s in enumerate(shards)}
    node_index = {n: 1 + len(shards) + i for i, n in enumerate(nodes)}
    sink = 1 + len(shards) + len(nodes)
    flow = min_cost_flow.SimpleMinCostFlow()
    arcs: list[tuple[int, str, Seat]] = []
    for s in shards:
        flow.add_arc_with_capacity_and_unit_cost(0, shard_index[s], 1, 0)
        choices = {c.member: c for c in options.get(s, ())}
        if s in current:
            choices.setdefault(current[s].member, current[s])
        for member in sorted(choices):
            choice = choices[member]
            if choice.node not in node_index:
                continue
            cost = 0 if s in current and current[s].member == member else 1
            arc = flow.add_arc_with_capacity_and_unit_cost(
                shard_index[s], node_index[choice.node], 1, cost
            )
            arcs.append((arc, s, choice))
    for n in nodes:
        flow.add_arc_with_capacity_and_unit_cost(node_index[n], sink, max(0, room[n]), 0)
    if not arcs:
        return {}
    flow.set_node_supply(0, len(shards))
    flow.set_node_supply(sink, -len(shards))
    status = flow.solve_max_flow_with_min_cost()
    if status != min_cost_flow.SimpleMinCostFlow.OPTIMAL:
        raise RuntimeError(f"min-cost flow of the master seating ended {status}")
    return {s: choice for arc, s, choice in arcs if flow.flow(arc) > 0}


def chains(
    current: Mapping[str, Seat], chosen: Mapping[str, Seat], load: Mapping[str, int], cap: int
) -> list[list[str]]:
    """The changes from ``current`` to ``chosen`` as chains of shards, in the order found.

    ``load``: masters per node before any change (every master counted). Each chain starts
    with a shard leaving a node over ``cap`` and follows it: onto a node with room (the end),
    or onto a full node, from which the next shard of the chain leaves. A change that belongs
    to no such chain (none does, from ``seat``) is left out: that shard keeps its master."""
    leaving: dict[str, deque[str]] = defaultdict(deque)
    for s in sorted(chosen):
        if s in current and chosen[s].member != current[s].member:
            leaving[current[s].node].append(s)
    loads = defaultdict(int, load)
    out: list[list[str]] = []
    for start in sorted(n for n in leaving if loads[n] > cap):
        while leaving[start] and loads[start] > cap:
            first = leaving[start].popleft()
            loads[start] -= 1
            chain = [first]
            here = chosen[first].node
            while loads[here] >= cap and leaving[here]:
                shard = leaving[here].popleft()
                chain.append(shard)
                here = chosen[shard].node
            if loads[here] >= cap:  # nowhere to end: undo (not reached with seat's answers)
                loads[start] += 1
                continue
            loads[here] += 1
            out.append(chain)
    return out
