"""The small-batch fast paths of solve(): the one-walk assessment and the narrowed model.

Each must give the answers the plain paths give; these tests compare behaviour, never time.
"""

import pytest

from models.kube_objects import build_snapshot, flatten
from models.policy import Policy
from models.snapshot import Snapshot
from models.synthetic import generate_cluster
from solver import solve as solve_module
from solver.check import (
    assess,
    check_plan,
    evaluate_objective,
    keep_plan,
    worst_domain_loss,
)
from solver.greedy import greedy_plan
from solver.problem import Problem, build_problem, narrow_for_batch
from solver.solve import SolveOptions, _seed_classes, _seed_placement, solve

OPTS = SolveOptions(time_limit=20, workers=1)


def running_cluster(policy: Policy, pending: int = 2) -> Snapshot:
    """1,000 nodes carelessly filled by 900 running shards, with a few new shards pending."""
    return build_snapshot(
        flatten([generate_cluster(1000, pending, running_shards=900, seed=3)]), policy
    )


@pytest.mark.parametrize("survive", ["none", "zone", "host"])
def test_assess_agrees_with_the_three_checks(survive: str) -> None:
    policy = Policy.model_validate({"rules": {"survive": survive}})
    snap = running_cluster(policy)
    plan = greedy_plan(snap, policy)
    verdict = assess(snap, policy, plan)
    assert verdict.violations == check_plan(snap, policy, plan)
    assert verdict.terms == evaluate_objective(snap, policy, plan)
    assert verdict.worst_domain_loss == worst_domain_loss(snap, policy, plan)
    assert verdict.running_total is None


def test_running_total_bounds_every_place_plan() -> None:
    """What the running members cost alone is no more than any plan that adds pods."""
    policy = Policy()
    snap = running_cluster(policy)
    for plan in (greedy_plan(snap, policy), solve(snap, policy, "place", OPTS)):
        verdict = assess(snap, policy, plan, running_total=True)
        assert verdict.running_total is not None
        assert verdict.running_total <= verdict.terms["total"]


def test_running_total_is_the_objective_of_the_plan_that_places_nothing() -> None:
    policy = Policy()
    snap = running_cluster(policy)
    verdict = assess(snap, policy, greedy_plan(snap, policy), running_total=True)
    assert verdict.running_total == evaluate_objective(snap, policy, keep_plan(snap))["total"]


def test_a_small_batch_is_narrowed_and_keeps_every_rack() -> None:
    policy = Policy()
    snap = running_cluster(policy)
    problem = build_problem(snap, policy, "place")
    seed = _seed_placement(problem)
    narrowed = narrow_for_batch(problem, _seed_classes(problem, seed), 1)
    assert narrowed is not None and narrowed.pruned
    racks = {c.rack for c in problem.classes}
    for full, small in zip(problem.groups, narrowed.groups, strict=True):
        assert set(small.candidates) < set(full.candidates)
        assert {problem.classes[c].rack for c in small.candidates} == racks
        # the seed's own classes stay, so the seed remains a solution of the narrowed model
        assert _seed_classes(problem, seed).get(full.index, set()) <= set(small.candidates)


def test_narrowed_plan_matches_the_full_model() -> None:
    policy = Policy()
    snap = running_cluster(policy, pending=3)
    fast = solve(snap, policy, "place", OPTS)
    full = solve(snap, policy, "place", SolveOptions(time_limit=20, workers=1, narrow=False))
    greedy = evaluate_objective(snap, policy, greedy_plan(snap, policy))["total"]
    assert not fast.unplaced and not full.unplaced
    assert len(fast.hard_violations) == len(full.hard_violations)
    assert fast.objective <= greedy
    # the reported bound is valid for the full problem, not just the narrowed one
    assert fast.bound <= full.objective
    assert fast.bound <= fast.objective
    if fast.status == "OPTIMAL":
        assert fast.objective == full.objective


def test_a_narrowed_model_that_cannot_place_falls_back_to_the_full_one(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Narrow to one class per group (too few hosts for a shard): the full model must decide."""
    calls: list[Problem] = []

    def too_narrow(problem: Problem, seed_classes: object, cap: int) -> Problem | None:
        narrowed = narrow_for_batch(problem, {}, cap)
        assert narrowed is not None
        for g in narrowed.groups:
            tiny = [c for c in g.candidates if problem.classes[c].size == 1][:1]
            g.candidates = tiny or g.candidates[:1]
        calls.append(narrowed)
        return narrowed

    monkeypatch.setattr(solve_module, "narrow_for_batch", too_narrow)
    policy = Policy()
    snap = running_cluster(policy, pending=2)
    plan = solve(snap, policy, "place", OPTS)
    assert calls, "the narrowed path was not taken"
    assert not plan.unplaced
    placed = [a for a in plan.assignments if a.action == "place"]
    assert len(placed) == 6 and all(a.node for a in placed)
    new_pods = {a.pod for a in placed}
    assert not [v for v in plan.hard_violations if set(v.pods) & new_pods]


def test_a_narrowed_model_out_of_time_keeps_the_seed_without_the_full_model(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The full model is bigger: when the small one found nothing in time, neither would it."""
    solved: list[bool] = []
    real = solve_module._solve_once

    def out_of_time(
        problem: Problem, options: SolveOptions, strengths: dict[str, str], seed: object
    ) -> object:
        solved.append(problem.pruned)
        result = real(problem, options, strengths, seed)  # type: ignore[arg-type]
        return solve_module._Solved("UNKNOWN", solve_module.Placement(), 0.0, 0.0, 0, result.big)

    monkeypatch.setattr(solve_module, "_solve_once", out_of_time)
    policy = Policy()
    snap = running_cluster(policy, pending=2)
    plan = solve(snap, policy, "place", OPTS)
    assert solved == [True], "only the narrowed model is solved"
    seed = _seed_placement(build_problem(snap, policy, "place"))
    placed = {a.pod: a.node for a in plan.assignments if a.action == "place"}
    assert len(placed) == 6 and placed == {k: seed.node[k] for k in placed}
    assert plan.status == "UNKNOWN" and not plan.unplaced


def test_narrowing_can_be_turned_off_and_skips_rebalance() -> None:
    policy = Policy()
    snap = running_cluster(policy)
    assert narrow_for_batch(build_problem(snap, policy, "rebalance"), {}, 1) is None
    plan = solve(snap, policy, "place", SolveOptions(time_limit=20, workers=1, narrow=False))
    assert not plan.unplaced
