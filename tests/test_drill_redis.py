"""``drill --roles redis`` against real redis-server processes: roles, replication offsets and
slots come from Redis, so a failover the labels never heard of changes the answer."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from click.testing import CliRunner

from placer.cli import main
from placer.redis.ops import failover_to
from tests.test_redis_roles import cluster_objects, pod_name, write_dump

if TYPE_CHECKING:  # imported for real by pytest_plugins, so asserts get rewritten
    from tests.redis_harness import RedisClusterHarness

pytest_plugins = ["tests.redis_harness"]


def slots_of(h: RedisClusterHarness, ip: str) -> int:
    """Slots served by the master at ``ip``, through redis-py's own parser."""
    entry = h.view(ip)[f"{ip}:{h.port}"]
    return sum(int(hi) - int(lo) + 1 for lo, hi in entry["slots"])


def drill(args: list[str]) -> Any:
    return CliRunner().invoke(main, ["drill", *args])


@pytest.mark.redis
def test_roles_offsets_and_slots_come_from_redis(
    redis_cluster: RedisClusterHarness, tmp_path: Path
) -> None:
    h = redis_cluster
    labelled = h.layout()
    (m0, r0), (m1, r1), (m2, r2) = labelled.items()
    # Shard 1 fails over in Redis only: r1 leads, the labels still say m1.
    failover_to(h.endpoint(r1), timeout_s=20)
    h.wait_layout({m0: r0, r1: m1, m2: r2})
    with h.cluster_client() as client:
        for i in range(60):  # writes on every shard, so replication offsets move
            client.set(f"key-{i}", "x" * 100)
    # One node per zone z0..z4; shard 0 lives whole in z0.
    placement = [("n0", [m0, r0]), ("n1", [m1]), ("n2", [r1]), ("n3", [m2]), ("n4", [r2])]
    dump = write_dump(tmp_path / "dump.yaml", cluster_objects(h, labelled, placement))
    common = ["-f", dump, "--redis-port", str(h.port), "-o", "json"]

    # Labels: r1 is a replica, so losing z2 costs no master.
    by_labels = drill([*common, "--fail", "zone=z2"])
    assert by_labels.exit_code == 0, by_labels.output
    (cache,) = json.loads(by_labels.stdout)["failures"][0]["clusters"]
    assert cache["mastersLost"] == 0 and cache["promotions"] == []
    assert cache["slotsUnavailable"] is None

    before = int(h.info_replication(m1)["slave_repl_offset"])
    by_redis = drill([*common, "--fail", "zone=z2", "--roles", "redis"])
    after = int(h.info_replication(m1)["slave_repl_offset"])
    assert by_redis.exit_code == 0, by_redis.output
    assert by_redis.stderr == ""
    report = json.loads(by_redis.stdout)
    assert report["roles"] == "redis" and report["slots"] == "redis"
    assert "highest replication offset" in report["promotionRule"]
    (cache,) = report["failures"][0]["clusters"]
    assert (cache["mastersLost"], cache["masters"], cache["majorityKept"]) == (1, 3, True)
    (promotion,) = cache["promotions"]
    assert (promotion["shard"], promotion["from"], promotion["to"]) == (
        "1",
        f"default/{pod_name(r1)}",
        f"default/{pod_name(m1)}",
    )
    assert before <= promotion["offset"] <= after and promotion["offset"] > 0
    assert cache["slotsUnavailable"] == 0

    # Losing z0 takes shard 0 whole: its slots, as Redis serves them, go offline.
    lost = drill([*common, "--fail", "zone=z0", "--roles", "redis"])
    assert lost.exit_code == 1, lost.output
    (cache,) = json.loads(lost.stdout)["failures"][0]["clusters"]
    assert cache["shardsLost"] == 1 and cache["unavailableShards"] == ["0"]
    assert cache["slotsUnavailable"] == slots_of(h, m0) > 0
    assert sum(slots_of(h, ip) for ip in (m0, r1, m2)) == 16384

    table = drill(["-f", dump, "--redis-port", str(h.port), "--roles", "redis"])
    assert "slots: read from Redis" in table.stdout
    assert f"default/{pod_name(m1)} (offset " in table.stdout
