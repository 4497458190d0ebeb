"""The real-API benchmark's comparisons, from its runs' results (no control plane needed)."""

import argparse
import os
from datetime import datetime
from typing import Any

import pytest

from benchmarks.real_api import (
    RawRates,
    Round,
    RunResult,
    across_rounds,
    against_targets,
    led_at,
    pin,
    placer_cpus,
    violation_lines,
)
from models.plan import Violation


def _run(mode: str, **fields: Any) -> RunResult:
    base: dict[str, Any] = dict(
        mode=mode, nodes=1000, pods=1500, bound=1500, created_seconds=3.5, seconds=28.0,
        pods_per_second=53.5, first_bind=0.06, shard_p50=10.0, shard_p90=20.0, shard_p99=23.0,
        hard=0, soft=0, soft_rules={}, zone_master_loss=0.33, rack_master_loss=0.01,
        load_start=1.0, load_end=1.0,
    )  # fmt: skip
    base.update(fields)
    return RunResult(**base)


def test_gate_is_compared_with_stock_and_the_binder_with_the_no_decision_placer() -> None:
    lines = against_targets(
        [
            _run("gate", pods_per_second=52.7, shard_p50=10.89),
            _run("stock", pods_per_second=53.5, shard_p50=10.87),
            _run("bind", cpu={"binder": 2.79}, placer_cpu_to_exit=4.05),
            _run("trivial", pods_per_second=380.0, cpu={"binder": 1.33}, placer_cpu_to_exit=1.50),
        ]
    )
    assert lines == [
        "gate against stock: pods/s 52.7 against 53.5 (0.985x); shard p50 10.89 s against 10.87 s",
        "bind against the no-decision placer: 53.5 pods/s = 14% of 380.0",
        "binder CPU beyond the no-decision placer's: 0.97 ms a pod to the last bind, "
        "1.70 ms a pod to the placers' exit",
    ]


def test_a_comparison_is_left_out_when_one_side_did_not_run_or_was_not_measured() -> None:
    assert against_targets([_run("gate"), _run("bind", cpu={"binder": 2.0})]) == []
    only_window = against_targets(
        [
            _run("bind", cpu={"binder": 2.0}, placer_cpu_to_exit=None),
            _run("trivial", cpu={"binder": 1.25}, placer_cpu_to_exit=1.4),
        ]
    )
    assert only_window == [
        "bind against the no-decision placer: 53.5 pods/s = 100% of 53.5",
        "binder CPU beyond the no-decision placer's: 0.50 ms a pod to the last bind",
    ]


def test_bind_mode_is_weighed_against_the_api_servers_own_binding_rate() -> None:
    rates = RawRates(binds={1: 538.0, 8: 791.0, 32: 1181.0}, creates=761.0)
    lines = against_targets(
        [_run("stock", pods_per_second=53.5), _run("bind", pods_per_second=337.8)], rates
    )
    assert lines == [
        "bind against the API server's own Bindings: 337.8 pods/s (6.3x stock's 53.5) = "
        "63% of 538/s with 1 thread, 43% of 791/s with 8 threads, 29% of 1181/s with 32 threads"
    ]
    assert against_targets([_run("bind", pods_per_second=337.8)]) == []  # no raw run
    with_trivial = against_targets(
        [_run("trivial", pods_per_second=430.4), _run("bind", pods_per_second=337.8)], rates
    )
    assert with_trivial[1] == (
        "no-decision placer against the API server's own Bindings: 430.4 pods/s = 80% of "
        "538/s with 1 thread"
    )


def test_rounds_are_weighed_each_against_its_own_binding_rate_and_no_decision_placer() -> None:
    rounds = [
        (
            [_run("bind", pods_per_second=300.0), _run("trivial", pods_per_second=400.0)],
            RawRates(binds={1: 360.0, 8: 700.0}),
        ),
        (
            [_run("bind", pods_per_second=270.0), _run("trivial", pods_per_second=300.0)],
            RawRates(binds={1: 450.0}),
        ),
        ([_run("bind", pods_per_second=390.0), _run("trivial", pods_per_second=410.0)], None),
    ]
    assert across_rounds(rounds) == [
        "bind mode, share of the round's 1-thread Binding rate: 83%, 60% (80% or more in 1 of 2)",
        "no-decision placer, share of the round's 1-thread Binding rate: 111%, 67% "
        "(80% or more in 1 of 2)",
        "bind mode, share of the round's no-decision placer: 75%, 90%, 95% (80% or more in 2 of 3)",
    ]
    assert across_rounds([([_run("bind")], None)]) == []  # nothing to weigh it against


def test_bind_mode_on_pods_already_pending_is_weighed_against_the_binding_rate() -> None:
    rates = RawRates(binds={1: 480.0, 8: 821.0})
    lines = against_targets([_run("backlog", pods_per_second=514.0)], rates)
    assert lines == [
        "bind on pods already pending, from the Lease taken, against the API server's own "
        "Bindings: 514.0 pods/s = 107% of 480/s with 1 thread, 63% of 821/s with 8 threads"
    ]
    assert against_targets([_run("backlog", pods_per_second=514.0)]) == []  # no raw run
    rounds: list[Round] = [
        ([_run("backlog", pods_per_second=514.0)], rates),
        ([_run("backlog", pods_per_second=350.0)], RawRates(binds={1: 500.0})),
    ]
    assert across_rounds(rounds) == [
        "bind mode on pods already pending, share of the round's 1-thread Binding rate: "
        "107%, 70% (80% or more in 1 of 2)"
    ]


def test_the_backlog_run_counts_from_the_line_where_the_binder_took_the_lease() -> None:
    log = (
        "2026-12-07 02:10:01,004 INFO placer.binder.command binder run ab12: identity x, "
        "lease redis-placer/redis-placer-binder, leader election on\n"
        "2026-12-07 02:10:01,250 INFO placer.kube.leader leader election: x leads "
        "redis-placer-binder\n"
        "2026-12-07 02:10:09,000 INFO placer.kube.leader leader election: x leads again\n"
    )
    assert led_at(log) == datetime(2026, 12, 7, 2, 10, 1, 250_000).timestamp()
    assert led_at(log.splitlines()[0]) is None  # it never led: the run says so, not 0


def test_each_violation_names_the_binder_batch_that_placed_its_pods() -> None:
    zone = Violation(
        rule="replica-separation",
        severity="soft",
        pods=["bench-bind-1/bench-7-2", "bench-bind-1/bench-7-0"],
        nodes=["node-00003", "node-00006"],
        message="replica bench-bind-1/bench-7-2 shares zone zone-a with its master "
        "bench-bind-1/bench-7-0 (shard bench-bind-1/bench/7)",
    )
    lost = Violation(rule="survive", severity="soft", pods=[], message="losing zone zone-a ...")
    lines = violation_lines([zone, lost], {"bench-7-2": "ab12-4", "bench-7-0": "ab12-3"})
    assert lines == [
        "soft replica-separation: replica bench-bind-1/bench-7-2 shares zone zone-a with its "
        "master bench-bind-1/bench-7-0 (shard bench-bind-1/bench/7) "
        "(bench-7-2 in ab12-4, bench-7-0 in ab12-3)",
        "soft survive: losing zone zone-a ...",
    ]
    stock = violation_lines([zone], {})
    assert stock[0].endswith("(bench-7-2 in no binder batch, bench-7-0 in no binder batch)")


@pytest.mark.parametrize("given", ["x", "", ",", "0,y"])
def test_placer_cpus_that_are_not_cpu_numbers_are_refused(
    given: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit):
        placer_cpus(argparse.ArgumentParser(prog="real_api"), given)
    assert "--placer-cpus" in capsys.readouterr().err


def test_placer_cpus_must_leave_the_control_plane_a_cpu(
    capsys: pytest.CaptureFixture[str],
) -> None:
    usable = os.sched_getaffinity(0)
    every = ",".join(map(str, sorted(usable)))
    with pytest.raises(SystemExit):
        placer_cpus(argparse.ArgumentParser(prog="real_api"), every)  # none left for the plane
    with pytest.raises(SystemExit):
        placer_cpus(argparse.ArgumentParser(prog="real_api"), str(max(usable) + 1))  # not ours
    assert os.sched_getaffinity(0) == usable  # a refusal moves nothing
    assert placer_cpus(argparse.ArgumentParser(prog="real_api"), None) is None
    pin(os.getpid(), None)  # no --placer-cpus: nothing is pinned
    assert os.sched_getaffinity(0) == usable
