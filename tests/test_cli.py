"""The command line through click's runner: output contracts and exit codes."""

import json
from pathlib import Path

import yaml
from click.testing import CliRunner

from placer.cli import main
from tests.kube_dicts import node, redis_pod


def write_dump(tmp_path: Path, objects: list[dict[str, object]]) -> str:
    path = tmp_path / "dump.yaml"
    path.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": objects}))
    return str(path)


def test_the_demo_shows_within_one_screen_a_plan_that_survives_where_one_pod_at_a_time_does_not() -> (
    None
):
    result = CliRunner().invoke(main, ["demo", "--time-limit", "10"])
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert len(lines) <= 50 and max(len(line) for line in lines) <= 110
    rows = {line.split("  ")[0]: line.split() for line in lines if "  " in line}
    assert rows["pods placed"][-3:] == ["12/12"] * 3
    assert rows["survives losing a zone"][-5:] == ["yes", "NO:", "zone-b", "NO:", "zone-a"]
    drill = lines[lines.index("== drill: each zone lost in turn ==") :]
    for zone, losers in (("zone-a", 1), ("zone-b", 1), ("zone-c", 0)):
        line = next(line for line in drill if line.startswith(f"zone {zone} lost"))
        assert line.split()[3] == "survives"
        assert line.count("LOSES sessions: 1 of 3 masters left") == losers
    verdict = next(line for line in drill if line.startswith("verdict"))
    assert verdict.split() == [
        "verdict",
        "all",
        "3",
        "survived",
        "1",
        "of",
        "3",
        "lose",
        "1",
        "of",
        "3",
        "lose",
    ]
    assert "kube-scheduler does not" in result.stdout  # greedy is not called kube-scheduler's


def test_the_demo_on_one_zone_says_why_it_drills_racks_and_agrees_with_its_zone_row(
    tmp_path: Path,
) -> None:
    """Losing the only zone loses everything for every placement: the summary says NO, and the
    drill says why it loses each rack instead (never a silent switch to "all survived")."""
    nodes = [node(f"n{i}", "zone-a", f"r{i}") for i in range(6)]
    pods = [redis_pod(f"c-{s}-{k}", "c", s, None) for s in range(3) for k in range(2)]
    result = CliRunner().invoke(main, ["demo", "-f", write_dump(tmp_path, [*nodes, *pods])])
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[1].startswith("  6 nodes in 1 zone, 1 Redis cluster: ")
    zone_row = next(line for line in lines if line.startswith("survives losing a zone"))
    assert zone_row.split()[-6:] == ["NO:", "zone-a"] * 3
    drill = lines.index("== drill: each rack lost in turn ==")
    assert lines[drill + 1] == (
        "one zone only (zone-a): losing it loses everything; each rack lost in turn instead"
    )
    helped = CliRunner().invoke(main, ["demo", "--help"])
    assert "each rack is lost in turn instead" in " ".join(helped.stdout.split())


def test_the_demo_without_zone_labels_judges_no_zone(tmp_path: Path) -> None:
    """No zone label anywhere: no zone is judged, so the zone row is no "yes", and the drill
    says why it loses racks."""
    nodes = [node(f"n{i}", None, f"r{i}") for i in range(6)]
    pods = [redis_pod(f"c-{s}-{k}", "c", s, None) for s in range(3) for k in range(2)]
    result = CliRunner().invoke(main, ["demo", "-f", write_dump(tmp_path, [*nodes, *pods])])
    lines = result.stdout.splitlines()
    zone_row = next(line for line in lines if line.startswith("survives losing a zone"))
    assert "yes" not in zone_row and zone_row.count("-: no zone holds a pod") == 3
    drill = lines.index("== drill: each rack lost in turn ==")
    assert lines[drill + 1] == "no node has a zone label; each rack lost in turn instead"


def test_plan_json_contract(tmp_path: Path) -> None:
    dump = write_dump(
        tmp_path,
        [node(f"n{i}", "abc"[i], f"r{i}") for i in range(3)]
        + [redis_pod("r-0-0", "r", 0, "master"), redis_pod("r-0-1", "r", 0, "replica")],
    )
    result = CliRunner().invoke(main, ["plan", "-f", dump, "-o", "json"])
    assert result.exit_code == 0, result.output
    plan = json.loads(result.stdout)
    for key in (
        "status",
        "degraded",
        "objective",
        "bound",
        "solveSeconds",
        "assignments",
        "failovers",
        "unplaced",
        "violations",
    ):
        assert key in plan
    assert {a["pod"] for a in plan["assignments"]} == {"default/r-0-0", "default/r-0-1"}
    assert all(a["action"] == "place" and a["cluster"] == "default/r" for a in plan["assignments"])


def test_plan_reads_stdin(tmp_path: Path) -> None:
    text = yaml.safe_dump_all([node("n0", "a", "r0"), redis_pod("r-0-0", "r", 0, "master")])
    result = CliRunner().invoke(main, ["plan", "-f", "-", "-o", "yaml"], input=text)
    assert result.exit_code == 0, result.output
    assert yaml.safe_load(result.stdout)["assignments"][0]["node"] == "n0"


def test_plan_infeasible_exits_3_with_reason(tmp_path: Path) -> None:
    dump = write_dump(
        tmp_path,
        [node("n0", "a", "r0", memory="1Gi"), redis_pod("r-0-0", "r", 0, "master", memory="2Gi")],
    )
    result = CliRunner().invoke(main, ["plan", "-f", dump])
    assert result.exit_code == 3
    assert "insufficient memory" in result.output


def test_audit_exits_1_on_hard_violations(tmp_path: Path) -> None:
    dump = write_dump(
        tmp_path,
        [
            node("n0", "a", "r0", memory="64Gi", cpu="16"),
            redis_pod("r-0-0", "r", 0, "master", node="n0"),
            redis_pod("r-1-0", "r", 1, "master", node="n0"),
        ],
    )
    result = CliRunner().invoke(main, ["audit", "-f", dump])
    assert result.exit_code == 1
    assert "master-exclusivity" in result.output


def test_audit_clean_exits_0(tmp_path: Path) -> None:
    dump = write_dump(
        tmp_path,
        [
            node("n0", "a", "r0"),
            node("n1", "b", "r1"),
            redis_pod("r-0-0", "r", 0, "master", node="n0"),
            redis_pod("r-0-1", "r", 0, "replica", node="n1"),
        ],
    )
    result = CliRunner().invoke(main, ["audit", "-f", dump, "-o", "json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    # one master: losing its host (rack, zone) loses it, a soft finding and never "clean"
    assert {(v["rule"], v["severity"]) for v in report["violations"]} == {("survive", "soft")}
    assert [(v["level"], v["survived"]) for v in report["survival"]] == [
        ("host", False),
        ("rack", False),
        ("zone", False),
    ]
    assert report["survival"][2]["cannotSurvive"] == [
        "default/r has 1 master: losing one leaves 0 of 1, no majority; "
        "no number of shards survives losing one of 2 zones: a third zone would, with 3, or 5 "
        "and more, shards"
    ]
    # nothing was solved: no status, engine or bound
    assert report["solved"] is False
    assert not {"status", "engine", "bound", "gap", "solveSeconds"} & set(report)


def test_bad_input_is_one_line_exit_2(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("kind: List\nitems: [\n")
    result = CliRunner().invoke(main, ["plan", "-f", str(bad)])
    assert result.exit_code == 2
    assert result.stderr.startswith("error: ") and result.stderr.count("\n") == 1
    assert "Traceback" not in result.output


def test_unknown_policy_key_exit_2(tmp_path: Path) -> None:
    dump = write_dump(tmp_path, [node("n0", "a", "r0")])
    policy = tmp_path / "policy.yaml"
    policy.write_text("rules:\n  maxMasterPerNode: 2\n")
    result = CliRunner().invoke(main, ["plan", "-f", dump, "-p", str(policy)])
    assert result.exit_code == 2
    assert "rules.maxMasterPerNode" in result.stderr and "unknown key" in result.stderr


def test_missing_file_exit_2() -> None:
    result = CliRunner().invoke(main, ["plan", "-f", "/nonexistent/dump.yaml"])
    assert result.exit_code == 2
    assert "/nonexistent/dump.yaml" in result.stderr
