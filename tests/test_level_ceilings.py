"""The level models choose a utilisation ceiling only among ceilings that add room.

Dropping a ceiling whose rooms equal the one below it must not change any level's optimum: the
same placements fit under both, and the lower one costs less. Checked on the pure selection and
on random clusters, each level solved with every ceiling and with the kept ones only.
"""

import time
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

import solver.levels.model as level_model
from models.policy import Policy
from solver.levels.model import distinct_ceilings
from solver.levels.spec import LevelSolution
from solver.levels.topdown import LevelsOptions, place_by_levels
from tests.kube_dicts import snapshot
from tests.test_levels import MEDIUM, medium_clusters, medium_policies


def test_the_lowest_ceiling_and_every_change_are_kept() -> None:
    tables = [[1, 1, 2, 2, 2, 3], [0, 0, 0, 5, 5, 5]]
    assert distinct_ceilings(tables) == [0, 2, 3, 5]


def test_no_table_leaves_the_lowest_ceiling_only() -> None:
    assert distinct_ceilings([]) == [0]
    assert distinct_ceilings([[4, 4, 4]]) == [0]


@given(st.lists(st.lists(st.integers(0, 3), min_size=6, max_size=6), min_size=1, max_size=4))
def test_each_dropped_ceiling_has_the_rooms_of_a_kept_one_below(tables: list[list[int]]) -> None:
    kept = distinct_ceilings(tables)
    assert kept[0] == 0 and kept == sorted(set(kept))
    for i in range(6):
        below = max(k for k in kept if k <= i)
        assert all(t[i] == t[below] for t in tables)


def _every_ceiling(tables: list[list[int]]) -> list[int]:
    return list(range(len(tables[0]))) if tables else [0]


def _level_objectives(
    cluster: tuple[list[dict[str, Any]], list[dict[str, Any]]],
    policy: Policy,
    monkeypatch: pytest.MonkeyPatch,
) -> list[tuple[str, int, bool]]:
    """(level, objective, proven) of every level model one levels solve builds."""
    seen: list[tuple[str, int, bool]] = []
    solve_level = level_model.solve_level

    def recording(spec: Any, rooms: Any, pol: Policy, settings: Any) -> LevelSolution:
        solution = solve_level(spec, rooms, pol, settings)
        seen.append((spec.level, solution.objective, solution.proven))
        return solution

    with monkeypatch.context() as patch:
        patch.setattr("solver.levels.zones.solve_level", recording)
        patch.setattr("solver.levels.racks.solve_level", recording)
        snap = snapshot(*cluster, policy=policy)
        place_by_levels(snap, policy, None, LevelsOptions(time.monotonic() + 20, 1, 0))
    return seen


@MEDIUM
@given(medium_clusters(), medium_policies())
def test_kept_ceilings_give_the_optimum_of_every_ceiling(
    cluster: tuple[list[dict[str, Any]], list[dict[str, Any]]], policy: Policy
) -> None:
    """Level one, whose optimum is the plan's bound, proves the same optimum with every ceiling
    and with the kept ones (the levels below see what level one chose, which ties may vary)."""
    with pytest.MonkeyPatch.context() as monkeypatch:
        kept = _level_objectives(cluster, policy, monkeypatch)
        monkeypatch.setattr(level_model, "distinct_ceilings", _every_ceiling)
        every = _level_objectives(cluster, policy, monkeypatch)
    assert kept[0][0] == every[0][0] == "zone"
    if kept[0][2] and every[0][2]:
        assert kept[0][1] == every[0][1]


def test_kept_eligibility_follows_a_node_that_changed() -> None:
    """The warm eligibility answers as blocking_reason does, and judges a changed node again."""
    from models.policy import Policy as _Policy
    from solver.levels.rooms import EligibilityCache, constraint_signature
    from solver.predicates import blocking_reason
    from tests.kube_dicts import node, redis_pod

    policy = _Policy()
    pod = snapshot([node("n0", "a", "r0")], [redis_pod("c-0-0", "c", 0, None)], policy=policy)
    member = pod.members[0].pod
    plain = snapshot([node("n0", "a", "r0")], [], policy=policy).nodes[0]
    tainted = snapshot(
        [node("n0", "a", "r0", taints=["dedicated=other:NoSchedule"])], [], policy=policy
    ).nodes[0]
    cache = EligibilityCache()
    signature = constraint_signature(member)
    assert cache.accepts(member, signature, plain) is (blocking_reason(member, plain) is None)
    assert cache.accepts(member, signature, plain) is True
    assert cache.accepts(member, signature, tainted) is False  # another object: judged again
