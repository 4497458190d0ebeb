"""rebalance never says "no changes needed" while one domain's loss would take a shard: it names
what is broken and, with moves off, how many moves would mend it and the flag that allows them."""

import json
import time
from pathlib import Path

import yaml
from click.testing import CliRunner

from models.kube_objects import build_snapshot
from models.policy import Policy
from placer.cli import main
from placer.rebalance.command import OUT_OF_TIME_MEND, _survival_left
from tests.kube_dicts import node, redis_pod

ZONES = ("a", "b", "c")


def _objects() -> list[dict[str, object]]:
    """Shard 0 lies wholly inside zone a (both members); shards 1 and 2 are spread."""
    nodes = [node(f"{z}{i}", f"zone-{z}", f"zone-{z}-r{i}") for z in ZONES for i in (0, 1)]
    pods = [
        redis_pod("s0-0", "cache", 0, "master", node="a0"),
        redis_pod("s0-1", "cache", 0, "replica", node="a1"),
        redis_pod("s1-0", "cache", 1, "master", node="b0"),
        redis_pod("s1-1", "cache", 1, "replica", node="c0"),
        redis_pod("s2-0", "cache", 2, "master", node="c1"),
        redis_pod("s2-1", "cache", 2, "replica", node="b1"),
    ]
    return [*nodes, *pods]


def _dump(tmp_path: Path) -> str:
    path = tmp_path / "cluster.yaml"
    path.write_text(yaml.safe_dump({"kind": "List", "items": _objects()}))
    return str(path)


def test_moves_off_says_what_is_broken_and_how_many_moves_mend_it(tmp_path: Path) -> None:
    dump = _dump(tmp_path)
    table = CliRunner().invoke(main, ["rebalance", "-f", dump, "--max-moves", "0"])
    assert "no changes needed" not in table.output, table.output
    assert "survival broken: losing one zone" in table.output
    assert "allow them with --max-moves 1" in table.output
    doc = json.loads(
        CliRunner().invoke(main, ["rebalance", "-f", dump, "--max-moves", "0", "-o", "json"]).output
    )
    zone = next(row for row in doc["survivalBroken"] if row["level"] == "zone")
    assert any("zone-a" in t for t in zone["takes"])
    assert "--max-moves 1" in zone["mend"]


def test_a_surviving_placement_needs_no_changes(tmp_path: Path) -> None:
    nodes = [node(f"{z}0", f"zone-{z}", f"zone-{z}-r0") for z in ZONES]
    pods = [
        redis_pod(
            f"s{i}-{j}",
            "cache",
            i,
            "master" if j == 0 else "replica",
            node=f"{ZONES[(i + j) % 3]}0",
        )
        for i in range(3)
        for j in range(2)
    ]
    path = tmp_path / "ok.yaml"
    path.write_text(yaml.safe_dump({"kind": "List", "items": [*nodes, *pods]}))
    result = CliRunner().invoke(main, ["rebalance", "-f", str(path), "--max-moves", "0"])
    assert "survival broken" not in result.output
    assert "no changes needed" in result.output, result.output


def test_a_mend_not_worked_out_in_time_says_so() -> None:
    """With the command's time spent, the mend is not solved for (a solve of the whole cluster
    would run past the limit): the row says the time ran out, never that nothing mends it."""
    policy = Policy()
    snapshot = build_snapshot(_objects(), policy)
    late = _survival_left(snapshot, policy, [], (0, None), time.monotonic() - 1, 0.2)
    zone = next(row for row in late if row["level"] == "zone")
    assert zone["mend"] == OUT_OF_TIME_MEND
    in_time = _survival_left(snapshot, policy, [], (0, None), time.monotonic() + 30, 0.2)
    assert "--max-moves 1" in next(r for r in in_time if r["level"] == "zone")["mend"]
