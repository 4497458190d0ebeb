"""``redis-placer rebalance`` dry run: the change list, cheapest first."""

import json
from pathlib import Path

import yaml
from click.testing import CliRunner

from placer.cli import main
from tests.kube_dicts import node, redis_pod


def dump(tmp_path: Path) -> str:
    objs = [
        node("n1", "a", "a1", memory="64Gi", cpu="16"),
        node("n2", "b", "b1", memory="64Gi", cpu="16"),
        redis_pod("r-0-0", "r", 0, "master", node="n1"),
        redis_pod("r-0-1", "r", 0, "replica", node="n2"),
        redis_pod("r-1-0", "r", 1, "master", node="n1"),
        redis_pod("r-1-1", "r", 1, "replica", node="n2"),
    ]
    path = tmp_path / "dump.yaml"
    path.write_text(yaml.safe_dump({"kind": "List", "items": objs}))
    return str(path)


def test_dry_run_prefers_a_failover(tmp_path: Path) -> None:
    result = CliRunner().invoke(main, ["rebalance", "-f", dump(tmp_path), "-o", "json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["apply"] is False
    assert any(v["rule"] == "master-exclusivity" for v in report["auditBefore"])
    assert [c["kind"] for c in report["changes"]] == ["failover"]
    assert report["violationsAfterPlan"] == [] or all(
        v["severity"] == "soft" for v in report["violationsAfterPlan"]
    )


def test_table_says_dry_run(tmp_path: Path) -> None:
    result = CliRunner().invoke(main, ["rebalance", "-f", dump(tmp_path)])
    assert result.exit_code == 0
    assert "failover" in result.output and "dry run" in result.output


def test_apply_needs_a_live_cluster(tmp_path: Path) -> None:
    result = CliRunner().invoke(main, ["rebalance", "-f", dump(tmp_path), "--apply"])
    assert result.exit_code == 2
    assert "--apply acts on a live cluster" in result.stderr
