"""The real-API benchmark's comparisons, from its runs' results (no control plane needed)."""

from typing import Any

from benchmarks.real_api import RunResult, against_targets


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
            _run("trivial", cpu={"binder": 1.33}, placer_cpu_to_exit=1.50),
        ]
    )
    assert lines == [
        "gate against stock: pods/s 52.7 against 53.5 (0.985x); shard p50 10.89 s against 10.87 s",
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
        "binder CPU beyond the no-decision placer's: 0.50 ms a pod to the last bind"
    ]
