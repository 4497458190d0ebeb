"""The master seating (solver/seating.py) against brute force on small random clusters: the
most shards seated under the cap, then the fewest failovers; and its chains, any prefix of
which leaves no node with more masters than before or than the cap."""

import itertools
import random
from collections import Counter

import pytest

from solver.seating import Seat, chains, seat


def _instance(rng: random.Random) -> tuple[dict[str, list[Seat]], dict[str, Seat], int, int]:
    """Shards of 1-3 members on a few nodes; the current master is member 0."""
    nodes = [f"n{i}" for i in range(rng.randint(2, 5))]
    cap = rng.choice([1, 1, 2])
    options: dict[str, list[Seat]] = {}
    current: dict[str, Seat] = {}
    for s in range(rng.randint(1, 6)):
        hosts = rng.sample(nodes, rng.randint(1, min(3, len(nodes))))
        members = [Seat(f"s{s}-{i}", h) for i, h in enumerate(hosts)]
        current[f"s{s}"] = members[0]
        # Some members may not be master (e.g. a required level shared with another member).
        options[f"s{s}"] = [m for m in members if rng.random() < 0.8]
    return options, current, cap, len(nodes)


def _brute(options: dict[str, list[Seat]], current: dict[str, Seat], cap: int) -> tuple[int, int]:
    """(most shards seated, fewest failovers among those) over every choice per shard."""
    shards = sorted(current)
    choices = []
    for s in shards:
        allowed = {c.member: c for c in options[s]}
        allowed.setdefault(current[s].member, current[s])
        choices.append([None, *allowed.values()])
    best = (-1, 0)
    for pick in itertools.product(*choices):
        load = Counter(c.node for c in pick if c is not None)
        if any(n > cap for n in load.values()):
            continue
        seated = sum(c is not None for c in pick)
        changed = sum(
            1 for s, c in zip(shards, pick, strict=True) if c and c.member != current[s].member
        )
        if (seated, -changed) > (best[0], -best[1]):
            best = (seated, changed)
    return best


@pytest.mark.parametrize("seed", range(150))
def test_the_seating_is_the_largest_with_the_fewest_failovers(seed: int) -> None:
    rng = random.Random(seed)
    options, current, cap, _ = _instance(rng)
    nodes = {c.node for seats in options.values() for c in seats} | {
        c.node for c in current.values()
    }
    chosen = seat(options, current, {n: cap for n in nodes})
    load = Counter(c.node for c in chosen.values())
    assert all(n <= cap for n in load.values())
    for s, c in chosen.items():
        assert c == current[s] or c in options[s]
    changed = sum(1 for s, c in chosen.items() if c.member != current[s].member)
    assert (len(chosen), changed) == _brute(options, current, cap)


@pytest.mark.parametrize("seed", range(150))
def test_any_prefix_of_the_chains_leaves_no_node_worse(seed: int) -> None:
    rng = random.Random(1000 + seed)
    options, current, cap, _ = _instance(rng)
    nodes = {c.node for seats in options.values() for c in seats} | {
        c.node for c in current.values()
    }
    chosen = seat(options, current, {n: cap for n in nodes})
    before = Counter(c.node for c in current.values())
    found = chains(current, chosen, before, cap)
    assert len({s for chain in found for s in chain}) == sum(len(c) for c in found)
    for k in range(len(found) + 1):
        masters = dict(current)
        for chain in found[:k]:
            for s in chain:
                masters[s] = chosen[s]
        load = Counter(c.node for c in masters.values())
        assert all(load[n] <= max(before[n], cap) for n in load), (k, found)
    # All of them: every node over the cap that the seating relieves is relieved.
    after = Counter(c.node for c in masters.values())
    over_before = sum(max(0, n - cap) for n in before.values())
    over_after = sum(max(0, n - cap) for n in after.values())
    unseated = len(current) - len(chosen)
    assert over_after <= unseated <= over_before


def test_the_chains_start_on_the_full_node_and_end_where_there_is_room() -> None:
    """Node a holds two masters (cap 1); b holds one whose shard can go to c: a chain of two."""
    current = {"x": Seat("x0", "a"), "y": Seat("y0", "a"), "z": Seat("z0", "b")}
    options = {"x": [Seat("x0", "a")], "y": [Seat("y0", "a"), Seat("y1", "b")]}
    options["z"] = [Seat("z0", "b"), Seat("z1", "c")]
    chosen = seat(options, current, {"a": 1, "b": 1, "c": 1})
    assert chosen == {"x": Seat("x0", "a"), "y": Seat("y1", "b"), "z": Seat("z1", "c")}
    assert chains(current, chosen, Counter({"a": 2, "b": 1}), 1) == [["y", "z"]]


def test_a_node_with_no_room_seats_nobody_new() -> None:
    current = {"x": Seat("x0", "a"), "y": Seat("y0", "a")}
    options = {"x": [Seat("x1", "b")], "y": [Seat("y1", "b")]}
    chosen = seat(options, current, {"a": 1, "b": 0})
    assert len(chosen) == 1 and all(c.node == "a" for c in chosen.values())
    assert chains(current, chosen, Counter({"a": 2}), 1) == []
