"""``redis-placer maintenance check|prepare`` against a real Redis Cluster behind an in-memory
API server: what a drain would do, in order, and the handovers themselves."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

import pytest
from click.testing import CliRunner

from placer.cli import main
from placer.kube.fake import FakeKubeAdapter
from tests.test_guard import _cluster, _role

if TYPE_CHECKING:
    from tests.redis_harness import RedisClusterHarness

pytest_plugins = ["tests.redis_harness"]


def _run(
    monkeypatch: pytest.MonkeyPatch, adapter: FakeKubeAdapter, h: RedisClusterHarness, *args: str
) -> tuple[int, str, str]:
    monkeypatch.setattr("placer.maintenance.command.make_adapter", lambda kubeconfig, ctx: adapter)
    result = CliRunner().invoke(main, ["maintenance", *args, "--redis-port", str(h.port)])
    return result.exit_code, result.stdout, result.stderr


def test_check_a_zone_lists_the_handovers_and_changes_nothing(
    monkeypatch: pytest.MonkeyPatch, redis_cluster: RedisClusterHarness
) -> None:
    h = redis_cluster
    adapter, ip = _cluster(h)
    code, out, _ = _run(monkeypatch, adapter, h, "check", "--zone", "zone-a", "-o", "json")
    assert code == 0, out
    doc = json.loads(out)
    assert doc["safe"] and doc["nodes"] == ["a0", "a1"]
    assert [(s["from"], s["to"]) for s in doc["handovers"]] == [("default/s0-m", "default/s0-r")]
    assert doc["replicasStopping"] == ["default/s2-r"]
    assert _role(h, ip["s0-m"]) == "master"
    assert not adapter.nodes["a0"].get("spec", {}).get("unschedulable")


def test_check_names_a_shard_that_would_be_lost(
    monkeypatch: pytest.MonkeyPatch, redis_cluster: RedisClusterHarness
) -> None:
    adapter, _ = _cluster(redis_cluster)
    code, out, _ = _run(monkeypatch, adapter, redis_cluster, "check", "a0", "b1")
    assert code == 1
    assert "NOT safe" in out
    assert "would be lost: shard default/cache/0 has every member on a0, b1" in out


def test_prepare_cordons_and_hands_over(
    monkeypatch: pytest.MonkeyPatch, redis_cluster: RedisClusterHarness
) -> None:
    h = redis_cluster
    adapter, ip = _cluster(h)
    code, out, _ = _run(monkeypatch, adapter, h, "prepare", "--zone", "zone-b")
    assert code == 0, out
    assert "cordoned b0" in out and "cordoned b1" in out
    assert "handed default/s1-m -> default/s1-r" in out
    assert _role(h, ip["s1-r"]) == "master" and _role(h, ip["s1-m"]) == "slave"
    assert adapter.nodes["b0"]["spec"]["unschedulable"] is True


def test_prepare_refuses_a_loss_and_changes_nothing(
    monkeypatch: pytest.MonkeyPatch, redis_cluster: RedisClusterHarness
) -> None:
    h = redis_cluster
    adapter, ip = _cluster(h)
    code, out, err = _run(monkeypatch, adapter, h, "prepare", "a0", "b1")
    assert "NOT safe" in out
    assert code == 1
    assert "nothing was changed" in err
    assert not adapter.nodes["a0"].get("spec", {}).get("unschedulable")
    assert _role(h, ip["s0-m"]) == "master"


def test_an_unknown_node_is_one_line(
    monkeypatch: pytest.MonkeyPatch, redis_cluster: RedisClusterHarness
) -> None:
    adapter, _ = _cluster(redis_cluster)
    code, _, err = _run(monkeypatch, adapter, redis_cluster, "check", "nowhere")
    assert code == 2
    assert err.strip() == "error: node nowhere: no such node in the cluster"
