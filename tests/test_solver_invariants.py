"""What every plan promises, at sizes where the formulation matters: never worse than greedy,
the engine named, the time limit kept, the same plan twice, and OPTIMAL only when proven."""

import time

import pytest

from models.kube_objects import build_snapshot, flatten
from models.plan import Plan
from models.policy import Policy
from models.snapshot import Snapshot
from models.synthetic import generate_cluster
from solver import solve as solve_module
from solver.check import check_plan, evaluate_objective
from solver.greedy import greedy_plan
from solver.levels.topdown import LevelsResult
from solver.placement import Placement
from solver.search import SearchResult
from solver.solve import SolveOptions, solve
from tests.kube_dicts import node, redis_pod, snapshot


def generated(nodes: int, shards: int, policy: Policy, **kwargs: object) -> Snapshot:
    return build_snapshot(flatten([generate_cluster(nodes, shards, seed=7, **kwargs)]), policy)  # type: ignore[arg-type]


def rank(snap: Snapshot, policy: Policy, plan: Plan) -> tuple[int, int, float]:
    """The order plans are judged in: unplaced pods, then hard violations, then the objective."""
    violations = check_plan(snap, policy, plan)
    return (
        len(plan.unplaced),
        sum(1 for v in violations if v.severity == "hard"),
        evaluate_objective(snap, policy, plan)["total"],
    )


def tight(policy: Policy, shards: int = 400) -> Snapshot:
    """300 nodes in zones of 50/30/20 %, pods of 12Gi on 32Gi and 64Gi nodes."""
    return generated(
        300,
        shards,
        policy,
        zone_shares=(0.5, 0.3, 0.2),
        node_sizes=(("8", "32Gi"), ("16", "64Gi")),
        redis_sizes=(("2", "12Gi"),),
    )


@pytest.mark.parametrize("survive", ["none", "zone"])
def test_six_hundred_shards_on_a_thousand_nodes_are_all_placed_by_cp_sat(survive: str) -> None:
    """One batch of 600 shards x 3 on 1,000 nodes, nothing tight: every pod placed, by CP-SAT,
    proven optimal, and no worse than greedy."""
    policy = Policy.model_validate({"rules": {"survive": survive}})
    snap = generated(1000, 600, policy)
    plan = solve(snap, policy, "place", SolveOptions(time_limit=20))
    assert not plan.unplaced
    assert plan.engine == "cp-sat"
    assert plan.status == "OPTIMAL" and plan.objective == plan.bound
    assert not plan.hard_violations
    assert rank(snap, policy, plan) <= rank(snap, policy, greedy_plan(snap, policy))


@pytest.mark.parametrize("survive", ["none", "zone"])
def test_a_tight_skewed_cluster_places_the_most_any_plan_can(survive: str) -> None:
    """Zones of 50/30/20 % cannot take every shard: the plan places as many pods as is proven
    possible, and at least greedy's (greedy, which spreads masters over zones, may match it)."""
    policy = Policy.model_validate({"rules": {"survive": survive}})
    snap = tight(policy)
    plan = solve(snap, policy, "place", SolveOptions(time_limit=20))
    baseline = greedy_plan(snap, policy)
    assert plan.unplaced
    assert plan.unplaced_bound is not None and plan.unplaced_bound == len(plan.unplaced)
    assert len(plan.unplaced) <= len(baseline.unplaced)
    assert rank(snap, policy, plan) <= rank(snap, policy, baseline)
    assert not plan.hard_violations


def test_the_plan_names_greedy_when_greedy_placed_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """When the levels bring nothing (here: made to place nothing), greedy's plan is returned
    and says so; otherwise CP-SAT's."""
    policy = Policy()
    snap = generated(60, 20, policy)
    assert solve(snap, policy, "place", SolveOptions(time_limit=10)).engine == "cp-sat"

    def nothing(snapshot: Snapshot, *_: object, **__: object) -> LevelsResult:
        return LevelsResult(Placement(), set(), {}, 0, 0, 0, False, "UNKNOWN")

    monkeypatch.setattr(solve_module, "place_by_levels", nothing)
    monkeypatch.setattr(solve_module, "SMALL_CLASS_MODEL", 0)
    monkeypatch.setattr(solve_module, "improve", lambda *a: SearchResult(a[3], 0, 0))
    plan = solve(snap, policy, "place", SolveOptions(time_limit=10))
    assert plan.engine == "greedy"
    assert not plan.unplaced
    assert plan.to_json_dict()["engine"] == "greedy"


def test_optimal_means_the_objective_meets_a_proven_bound() -> None:
    """Across cases of every kind: OPTIMAL exactly when objective == bound and nothing more can
    be placed; otherwise FEASIBLE with the gap between them."""
    for survive in ("none", "zone"):
        policy = Policy.model_validate({"rules": {"survive": survive}})
        for snap in (
            generated(100, 100, policy),
            tight(policy),
            generated(500, 50, policy, running_shards=200),
        ):
            plan = solve(snap, policy, "place", SolveOptions(time_limit=20))
            assert plan.bound <= plan.objective
            if plan.status == "OPTIMAL":
                assert plan.objective == plan.bound
                assert plan.unplaced_bound == len(plan.unplaced)
            else:
                assert plan.status == "FEASIBLE"
                assert plan.gap == pytest.approx((plan.objective - plan.bound) / plan.objective)


def test_the_same_input_gives_the_same_plan() -> None:
    policy = Policy.model_validate({"rules": {"survive": "zone"}})
    snap = tight(policy, shards=300)
    first = solve(snap, policy, "place", SolveOptions(time_limit=20))
    for _ in range(2):
        again = solve(snap, policy, "place", SolveOptions(time_limit=20))
        assert [(a.pod, a.node, a.role) for a in again.assignments] == [
            (a.pod, a.node, a.role) for a in first.assignments
        ]
        assert again.objective == first.objective and again.status == first.status


def test_the_time_limit_bounds_the_call() -> None:
    """A budget shorter than the work: the plan is there within the limit (+10 % or 1 s)."""
    policy = Policy.model_validate({"rules": {"survive": "zone"}})
    snap = generated(2000, 2000, policy, clusters=3)
    for limit in (3.0, 6.0):
        started = time.monotonic()
        plan = solve(snap, policy, "place", SolveOptions(time_limit=limit))
        elapsed = time.monotonic() - started
        assert elapsed <= limit + max(0.1 * limit, 1.0), elapsed
        assert plan.status in ("OPTIMAL", "FEASIBLE")


@pytest.mark.parametrize("memory", ["1e18", "9000000000000000000", "7Ei"])
def test_any_valid_quantity_is_modelled(memory: str) -> None:
    """Node memory up to the largest quantity Kubernetes holds (2^63 - 1 bytes) still gives a
    plan, never MODEL_INVALID."""
    nodes = [node(f"n{i}", "abc"[i % 3], f"r{i}", memory=memory) for i in range(6)]
    pods = [redis_pod(f"c-{s}-{r}", "c", s, None) for s in range(2) for r in range(3)]
    policy = Policy()
    for mode in ("place", "rebalance"):
        plan = solve(snapshot(nodes, pods), policy, mode, SolveOptions(time_limit=5))
        assert plan.status in ("OPTIMAL", "FEASIBLE")
        assert not plan.unplaced


def test_a_large_input_gets_greedys_plan_first_and_the_levels_in_what_is_left(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """When greedy and judging would take much of the budget, greedy's judged plan comes
    first; the levels then run in what is left and win when they do better."""
    policy = Policy()
    snap = generated(300, 200, policy)
    monkeypatch.setattr(solve_module, "_greedy_first", lambda _snap, _left: True)
    order: list[str] = []
    plan = solve(
        snap,
        policy,
        "place",
        SolveOptions(time_limit=20, progress=lambda phase, *_: order.append(phase.split(":")[0])),
    )
    assert order.index("greedy") < order.index("levels")
    assert not plan.unplaced and plan.status == "OPTIMAL" and plan.engine == "cp-sat"
    assert rank(snap, policy, plan) <= rank(snap, policy, greedy_plan(snap, policy))


def test_with_no_time_left_for_the_levels_greedys_plan_is_returned_on_time(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A budget that greedy and judging use up: the levels are not started, and greedy's plan
    (all placed, no hard violation) is returned at once."""
    policy = Policy()
    snap = generated(300, 200, policy)
    monkeypatch.setattr(solve_module, "_greedy_first", lambda _snap, _left: True)
    phases: list[str] = []
    began = time.monotonic()
    deadline = began + 0.01  # gone once greedy has run
    plan = solve(
        snap,
        policy,
        "place",
        SolveOptions(deadline=deadline, progress=lambda phase, *_: phases.append(phase)),
    )
    greedy = greedy_plan(snap, policy)
    assert "levels" not in phases
    assert plan.engine == "greedy" and not plan.unplaced and not plan.hard_violations
    assert rank(snap, policy, plan) == rank(snap, policy, greedy)


def test_where_greedy_first_would_starve_the_levels_they_come_first(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """When greedy and judging would take most of the budget, the levels come first; a plan
    they prove optimal is kept without spending the budget on greedy's whole plan."""
    policy = Policy()
    snap = generated(300, 200, policy)
    monkeypatch.setattr(solve_module, "_levels_first", lambda _snap, _left: True)
    order: list[str] = []
    plan = solve(
        snap,
        policy,
        "place",
        SolveOptions(time_limit=20, progress=lambda phase, *_: order.append(phase.split(":")[0])),
    )
    assert "levels" in order and "greedy" not in order
    assert not plan.unplaced and plan.status == "OPTIMAL" and plan.engine == "cp-sat"
    assert rank(snap, policy, plan) <= rank(snap, policy, greedy_plan(snap, policy))
