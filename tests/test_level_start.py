"""Level models on many Redis clusters: one pattern enumeration per shape, a budget that covers
the building, a start for level one when nothing seeds it, and a rough rack plan set aside."""

import math
import time
from collections import Counter
from typing import Any

import pytest

import solver.levels.model as level_model
import solver.levels.patterns as patterns
from models.cluster import Role
from models.policy import Policy
from models.snapshot import Snapshot
from solver.check import check_plan
from solver.levels.model import SolveSettings, solve_level
from solver.levels.patterns import OutOfTime, bundle_types
from solver.levels.rooms import Rooms, build_rooms
from solver.levels.shapes import build_shapes
from solver.levels.spec import UNPLACED, LevelSpec
from solver.levels.start import SLICES, balanced_start
from solver.levels.topdown import LevelsOptions, _rough, place_by_levels
from solver.levels.zones import zone_spec
from solver.placement import to_plan
from tests.kube_dicts import node, redis_pod, snapshot

STRENGTHS = {"rack": "preferred", "zone": "preferred"}


def shards(clusters: str, count: int, memory: str = "1Gi") -> list[dict[str, Any]]:
    return [
        redis_pod(f"{c}-{s}-{r}", c, s, None, memory=memory)
        for c in clusters
        for s in range(count)
        for r in range(3)
    ]


POLICY = Policy()


def zone_level(snap: Snapshot) -> tuple[LevelSpec, Rooms]:
    shapes = build_shapes(snap, partial=False)
    rooms = build_rooms(snap, POLICY, {}, {}, shapes.kinds)
    return zone_spec(shapes, rooms, POLICY, STRENGTHS, frozenset()), rooms


def uneven_zones() -> list[dict[str, Any]]:
    """Zone a has 6 nodes, b 3, c 1 small one: an even share of members does not fit c."""
    sizes = {"a": (6, "16Gi"), "b": (3, "16Gi"), "c": (1, "4Gi")}
    return [
        node(f"{z}{i}", z, f"{z}-r{i % 2}", memory=memory)
        for z, (count, memory) in sizes.items()
        for i in range(count)
    ]


def test_redis_clusters_of_one_shape_share_one_pattern_enumeration(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    snap = snapshot(uneven_zones(), shards("xyz", 4))
    spec, rooms = zone_level(snap)
    calls: list[str] = []
    enumerate_patterns = patterns.enumerate_patterns

    def counted(*args: Any) -> Any:
        calls.append(args[0].shard.cluster)
        return enumerate_patterns(*args)

    monkeypatch.setattr(patterns, "enumerate_patterns", counted)
    types = bundle_types(spec, rooms, POLICY)
    assert sorted(bt.cluster for bt in types) == ["default/x", "default/y", "default/z"]
    assert len(calls) == 1
    assert all(bt.patterns == types[0].patterns and bt.patterns for bt in types)


def test_a_level_model_not_built_within_its_budget_is_unsolved(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    snap = snapshot(uneven_zones(), shards("xy", 3))
    spec, rooms = zone_level(snap)
    with pytest.raises(OutOfTime):
        bundle_types(spec, rooms, POLICY, until=time.monotonic() - 1.0)

    def late(*_: Any) -> Any:
        raise OutOfTime

    monkeypatch.setattr(level_model, "bundle_types", late)
    solution = solve_level(spec, rooms, POLICY, SolveSettings(time_limit=5.0, workers=1, seed=0))
    assert solution.status == "UNKNOWN"
    assert solution.assignment == {}
    assert solution.unplaced_shards == {b.shard.key for b in spec.bundles}


def test_a_zone_whose_rack_model_runs_out_of_time_is_packed_whole(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """One zone: every shard has its master and replicas there, so the racks need a model;
    when it cannot be built in time, the zone's nodes are packed directly and every pod is
    still placed without a hard violation."""
    nodes = [node(f"a{i}", "a", f"a-r{i % 3}") for i in range(9)]
    snap = snapshot(nodes, shards("xy", 4))
    policy = Policy()
    real = level_model.bundle_types
    racks_tried: list[str] = []

    def no_time_for_racks(spec: LevelSpec, *args: Any) -> Any:
        if spec.level == "rack":
            racks_tried.append(spec.children[0].name)
            raise OutOfTime
        return real(spec, *args)

    monkeypatch.setattr(level_model, "bundle_types", no_time_for_racks)
    result = place_by_levels(snap, policy, None, LevelsOptions(time.monotonic() + 10.0, 1, 0))
    assert racks_tried
    assert not result.failed
    assert len(result.placement.node) == len(snap.pending)
    plan = to_plan(snap, result.placement, "place", "FEASIBLE")
    assert [v for v in check_plan(snap, policy, plan) if v.severity == "hard"] == []


def test_a_rack_plan_over_twice_its_bound_is_rough() -> None:
    assert _rough(87_396, 116, 0.0)  # measured: a first solution of a 60-cluster zone
    assert not _rough(232, 116, 0.0)
    assert not _rough(7_991, 7_991, 0.0)
    assert not _rough(300, 100, 250.0)  # within the gap it may keep
    assert _rough(10, 0, 0.0)


def _start_checks(spec: LevelSpec, rooms: Rooms) -> Counter[tuple[str, int]]:
    """The start, checked by plain arithmetic on the room tables: every bundle placed, no child
    past its room at the highest ceiling. Returns masters per (cluster, child)."""
    types = bundle_types(spec, rooms, POLICY)
    start = balanced_start(spec, rooms, types)
    assert start is not None
    members: Counter[tuple[int, int]] = Counter()
    masters_by_kind: Counter[tuple[int, int]] = Counter()
    masters: Counter[tuple[str, int]] = Counter()
    for bt in types:
        placed = sum(n for (t, _), n in start.items() if t == bt.index)
        assert placed == len(bt.bundles)
        for pi, pattern in enumerate(bt.patterns):
            n = start.get((bt.index, pi), 0)
            assert n == 0 or pattern.unplaced == 0
            for c, kind, role, k in pattern.counts:
                assert c != UNPLACED or n == 0
                members[(c, kind)] += n * k
                if role is Role.MASTER:
                    masters_by_kind[(c, kind)] += n * k
                    masters[(bt.cluster, c)] += n * k
    for (c, kind), n in members.items():
        assert n <= rooms.table(list(spec.children[c].nodes), kind)[-1]
    for (c, kind), n in masters_by_kind.items():
        assert n <= rooms.table(list(spec.children[c].nodes), kind, master=True)[-1]
    return masters


def test_the_start_places_every_bundle_within_room_and_spreads_masters() -> None:
    """One master a node at most (rules.maxMastersPerNode): 30 nodes for 3 x 9 masters."""
    nodes = [node(f"{z}{i}", z, f"{z}-r{i % 2}", memory="32Gi") for z in "abc" for i in range(10)]
    snap = snapshot(nodes, shards("xyz", 9))
    spec, rooms = zone_level(snap)
    masters = _start_checks(spec, rooms)
    slice_size = math.ceil(9 / SLICES)
    for cluster in "xyz":
        counts = [masters[(f"default/{cluster}", c)] for c in range(len(spec.children))]
        assert sum(counts) == 9
        assert max(counts) - min(counts) <= slice_size


def test_no_start_where_not_every_bundle_fits() -> None:
    """Ten nodes, one master each, for twelve shards: which to leave out is the search's."""
    snap = snapshot(uneven_zones(), shards("xy", 6))
    spec, rooms = zone_level(snap)
    assert balanced_start(spec, rooms, bundle_types(spec, rooms, POLICY)) is None


def test_the_start_keeps_a_small_zone_within_its_room() -> None:
    """Zone c is one 4Gi node: fewer members than an even third of the 24; the start goes
    around it rather than past it."""
    snap = snapshot(uneven_zones(), shards("xy", 4, memory="1500Mi"))
    spec, rooms = zone_level(snap)
    small = next(c for c, child in enumerate(spec.children) if child.name == "c")
    assert rooms.table(list(spec.children[small].nodes), 0)[-1] < 24 // 3
    masters = _start_checks(spec, rooms)
    assert sum(masters.values()) == 8
