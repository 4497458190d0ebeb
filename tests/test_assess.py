"""The one-walk assessment the solver judges every plan with gives the answers of the three
plain checks; these tests compare behaviour, never time."""

import pytest

from models.kube_objects import build_snapshot, flatten
from models.policy import Policy
from models.snapshot import Snapshot
from models.synthetic import generate_cluster
from solver.check import (
    assess,
    check_plan,
    evaluate_objective,
    keep_plan,
    worst_domain_loss,
)
from solver.greedy import greedy_plan
from solver.solve import SolveOptions, solve

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
