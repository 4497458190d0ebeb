"""The command line's contract: exit codes, the one error path, and what each report says.

Every case runs the real command through click's runner (stdout and stderr apart), or the real
process where pipes and entry points are the point.
"""

import gzip
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import click
import pytest
import yaml
from click.testing import CliRunner, Result

from placer.cli import main
from tests.kube_dicts import node, redis_pod
from tests.test_rebalance_cli import dump as two_masters_on_one_node

ROOT = Path(__file__).resolve().parent.parent


def run(args: list[str], stdin: str | bytes | None = None) -> Result:
    return CliRunner().invoke(main, args, input=stdin)


def write(tmp_path: Path, objects: list[dict[str, Any]], name: str = "dump.yaml") -> str:
    path = tmp_path / name
    path.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": objects}))
    return str(path)


def one_error_line(result: Result) -> str:
    """Exit 2, nothing on stdout, exactly one ``error:`` line on stderr; that line."""
    assert result.exit_code == 2, result.output
    assert result.stdout == ""
    assert result.stderr.startswith("error: ") and result.stderr.count("\n") == 1, result.stderr
    assert "Traceback" not in result.stderr
    return result.stderr


def three_zones(**extra: Any) -> list[dict[str, Any]]:
    return [node(f"n{i}", "abc"[i], f"r{i}", **extra) for i in range(3)]


def three_shards(cluster: str = "r") -> list[dict[str, Any]]:
    """Three whole shards, running cleanly: the healthy baseline."""
    pods = []
    for s in range(3):
        pods.append(redis_pod(f"{cluster}-{s}-0", cluster, s, "master", node=f"n{s}"))
        pods.append(redis_pod(f"{cluster}-{s}-1", cluster, s, "replica", node=f"n{(s + 1) % 3}"))
    return pods


COMMANDS = [["plan"], ["audit"], ["rebalance"]]
HEADROOM = ["headroom", "--shard-size", "2", "--cpu", "100m", "--memory", "1Gi"]
READERS = [
    *COMMANDS,
    ["drill"],
    HEADROOM,
    ["pdbs"],
    ["demo"],
    *([c, "-o", o] for c in ("plan", "audit", "rebalance", "drill") for o in ("html", "map")),
]
"""Every command that reads a snapshot, and the pictures of those that draw one."""


def command_id(command: list[str]) -> str:
    return " ".join(a for a in command if not a[0].isdigit() and a not in ("--cpu", "--memory"))


# --------------------------------------------------------------------------- nothing to judge


EMPTY_INPUTS = {
    "empty file": "",
    "comments only": "# kubectl get nodes,pods,statefulsets,pv,pvc,storageclasses -A -o yaml\n# (it failed)\n",
    "List of other kinds": yaml.safe_dump(
        {"kind": "List", "items": [{"kind": "ConfigMap", "metadata": {"name": "x"}}]}
    ),
    "items null": "apiVersion: v1\nkind: List\nitems: null\n",
    "empty JSON List": '{"kind": "List", "items": []}',
}


@pytest.mark.parametrize("command", READERS, ids=command_id)
@pytest.mark.parametrize("text", EMPTY_INPUTS.values(), ids=EMPTY_INPUTS.keys())
def test_an_input_with_nothing_in_it_is_never_healthy(
    tmp_path: Path, command: list[str], text: str
) -> None:
    path = tmp_path / "dump.yaml"
    path.write_text(text)
    line = one_error_line(run([*command, "-f", str(path)]))
    assert line.startswith(f"error: {path}: holds no")
    assert "--allow-empty" in line


@pytest.mark.parametrize("command", READERS, ids=command_id)
def test_empty_stdin_and_dev_null_are_errors(command: list[str]) -> None:
    assert one_error_line(run([*command, "-f", "-"], stdin="")).startswith("error: stdin: holds no")
    assert one_error_line(run([*command, "-f", os.devnull])).startswith("error: /dev/null")


@pytest.mark.parametrize("command", READERS, ids=command_id)
def test_allow_empty_accepts_an_empty_input(tmp_path: Path, command: list[str]) -> None:
    path = tmp_path / "dump.yaml"
    path.write_text("")
    result = run([*command, "-f", str(path), "--allow-empty"])
    assert result.exit_code == 0, result.output
    assert result.stderr == ""
    if "html" in command:
        assert result.stdout.startswith("<!DOCTYPE html>")


def test_nodes_without_pods_are_headrooms_question_and_an_error_elsewhere(tmp_path: Path) -> None:
    dump = write(tmp_path, three_zones())
    answer = run([*HEADROOM, "-f", dump, "-o", "json"])
    assert answer.exit_code == 0 and answer.stderr == "", answer.output
    assert json.loads(answer.stdout)["shards"] > 0
    for command in (["drill"], ["pdbs"]):
        line = one_error_line(run([*command, "-f", dump]))
        assert "no Pod objects" in line and "--allow-empty" in line


def test_nodes_without_pods_is_an_error_naming_the_selector(tmp_path: Path) -> None:
    line = one_error_line(run(["audit", "-f", write(tmp_path, three_zones())]))
    assert "no Pod objects" in line and "selector" in line


@pytest.mark.parametrize("command", [["audit"], ["drill"], ["pdbs"]], ids=command_id)
def test_only_finished_pods_is_nothing_to_judge(tmp_path: Path, command: list[str]) -> None:
    finished = three_shards()
    for pod in finished:
        pod["status"]["phase"] = "Succeeded"
    dump = write(tmp_path, three_zones() + finished)
    line = one_error_line(run([*command, "-f", dump]))
    assert "every pod the policy selector app=redis matches has finished (6 Succeeded" in line
    assert "--allow-empty" in line
    assert run([*command, "-f", dump, "--allow-empty"]).exit_code == 0


def test_a_selector_typo_is_not_a_clean_audit(tmp_path: Path) -> None:
    """The dump has 2 hard violations; a selector matching none of its pods must not hide them."""
    pods = [
        redis_pod("r-0-0", "r", 0, "master", node="n0"),
        redis_pod("r-0-1", "r", 0, "replica", node="n0"),
        redis_pod("r-1-0", "r", 1, "master", node="n0"),
    ]
    dump = write(tmp_path, three_zones() + pods)
    assert run(["audit", "-f", dump]).exit_code == 1  # the violations are there
    policy = tmp_path / "policy.yaml"
    policy.write_text("selector: {app: valkey}\n")
    line = one_error_line(run(["audit", "-f", dump, "-p", str(policy)]))
    assert "selector: no pod matches the policy selector app=valkey" in line
    assert "app is redis" in line  # what the pods do carry: the typo shows


# --------------------------------------------------------------------------- bytes that are not text


def test_a_gzipped_dump_is_named_as_such(tmp_path: Path) -> None:
    path = tmp_path / "dump.yaml.gz"
    path.write_bytes(gzip.compress(yaml.safe_dump(three_zones()).encode()))
    line = one_error_line(run(["plan", "-f", str(path)]))
    assert f"{path}: is gzip-compressed" in line and "gunzip -c" in line


def test_a_latin1_file_names_the_byte_and_line(tmp_path: Path) -> None:
    path = tmp_path / "dump.yaml"
    path.write_bytes(
        "kind: List\nitems:\n- kind: Node\n  metadata: {name: nœud-é}\n".encode(
            "latin-1", "replace"
        )
    )
    line = one_error_line(run(["audit", "-f", str(path)]))
    assert "is not UTF-8 text" in line and "line 4" in line


def test_random_bytes_on_stdin_are_one_line() -> None:
    noise = bytes(range(256)) * 4
    line = one_error_line(run(["plan", "-f", "-"], stdin=noise))
    assert line.startswith("error: stdin: holds binary data")


def test_a_binary_policy_file_is_one_line(tmp_path: Path) -> None:
    policy = tmp_path / "policy.yaml"
    policy.write_bytes(b"\x7fELF\x02\x01\x01\x00" + bytes(200))
    dump = write(tmp_path, three_zones() + three_shards())
    line = one_error_line(run(["plan", "-f", dump, "-p", str(policy)]))
    assert line.startswith(f"error: policy {policy}: holds binary data")


def test_a_utf8_byte_order_mark_is_accepted(tmp_path: Path) -> None:
    path = tmp_path / "dump.yaml"
    path.write_bytes(b"\xef\xbb\xbf" + yaml.safe_dump_all(three_zones() + three_shards()).encode())
    assert run(["audit", "-f", str(path)]).exit_code == 0


# --------------------------------------------------------------------------- one error path


@pytest.mark.parametrize("value", ["nan", "inf", "-inf", "NaN"])
@pytest.mark.parametrize(
    "command", [["plan"], ["rebalance"], ["demo"], ["binder", "--no-leader-elect"]]
)
def test_time_limit_must_be_finite(command: list[str], value: str) -> None:
    line = one_error_line(run([*command, "--time-limit", value]))
    assert "--time-limit" in line


@pytest.mark.parametrize(
    "args",
    [
        ["binder", "--enforce", "sometimes"],
        ["binder", "--no-such-option"],
        ["plan", "--mode", "shuffle"],
        ["rebalance", "--max-moves", "-1"],
        ["no-such-command"],
    ],
)
def test_usage_errors_are_lower_case_error_exit_2(args: list[str]) -> None:
    line = one_error_line(run(args))
    assert "Error:" not in line and "Usage:" not in line
    assert "--help" in line  # where to look


def test_binder_input_errors_take_the_same_path(tmp_path: Path) -> None:
    line = one_error_line(
        run(["binder", "--kubeconfig", str(tmp_path / "nope"), "--no-leader-elect"])
    )
    assert "cannot reach a cluster" in line
    bad = tmp_path / "policy.yaml"
    bad.write_text("rules: {maxMastersPerNode: 0}\n")
    line = one_error_line(run(["binder", "-p", str(bad), "--no-leader-elect"]))
    assert f"policy {bad}: rules.maxMastersPerNode:" in line


@pytest.mark.parametrize(
    "args",
    [
        ["plan"],
        ["audit"],
        ["drill"],
        ["pdbs"],
        ["headroom", "--shard-size", "3"],
        ["rebalance"],
        ["rebalance", "--apply"],
        ["binder", "--no-leader-elect"],
        ["release-gates"],
        ["release-gates", "--dry-run"],
    ],
)
def test_with_no_cluster_the_way_out_names_options_the_command_has(
    args: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    line = one_error_line(run([*args, "--kubeconfig", str(tmp_path / "nope")]))
    assert line.startswith("error: cannot reach a cluster ("), line
    way_out = line.rsplit("); ", 1)[1]
    named = set(re.findall(r"(?<![\w-])(--?[a-z][\w-]*)", way_out))
    command = main.get_command(click.Context(main), args[0])
    assert command is not None
    options = {opt for param in command.params for opt in param.opts}
    assert named and named <= options, (way_out, sorted(options))


def run_process(args: list[str], *, close_stdout: bool) -> tuple[int, str]:
    """The real process from this checkout; with ``close_stdout`` its reader is gone at once,
    as ``| head`` leaves it."""
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    code = "from placer.cli import main; main()"
    proc = subprocess.Popen(
        [sys.executable, "-c", code, *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
        cwd=ROOT,
    )
    assert proc.stdout is not None and proc.stderr is not None
    if close_stdout:
        proc.stdout.close()
    else:
        proc.stdout.read()
    err = proc.stderr.read().decode()
    return proc.wait(timeout=120), err


@pytest.mark.parametrize(
    "command",
    [["plan"], ["plan", "-o", "json"], ["audit"], ["rebalance"], ["drill"], HEADROOM, ["pdbs"]],
    ids=command_id,
)
def test_a_closed_pipe_changes_no_exit_code(tmp_path: Path, command: list[str]) -> None:
    dump = write(tmp_path, three_zones(memory="64Gi") + three_shards())
    expected, _ = run_process([*command, "-f", dump], close_stdout=False)
    code, err = run_process([*command, "-f", dump], close_stdout=True)
    assert code == expected == 0
    assert "Traceback" not in err and "BrokenPipe" not in err and "Exception ignored" not in err


def test_a_closed_pipe_keeps_exit_1_of_an_audit_with_violations(tmp_path: Path) -> None:
    pods = [
        redis_pod("r-0-0", "r", 0, "master", node="n0"),
        redis_pod("r-0-1", "r", 0, "replica", node="n0"),
    ]
    dump = write(tmp_path, three_zones() + pods)
    code, err = run_process(["audit", "-f", dump], close_stdout=True)
    assert code == 1 and "Traceback" not in err


# --------------------------------------------------------------------------- what reports say


def test_input_issues_are_error_lines_on_stderr_grouped_by_cause(tmp_path: Path) -> None:
    unlabelled = []
    for i in range(5):
        pod = redis_pod(f"x-{i}", "x", i, None)
        del pod["metadata"]["labels"]["redis-shard"]
        unlabelled.append(pod)
    dump = write(tmp_path, three_zones() + three_shards() + unlabelled)
    result = run(["plan", "-f", dump])
    assert result.exit_code == 2
    assert "input issues" not in result.stdout and "x-0" not in result.stdout
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert errors == [
        "error: 5 pods: label 'redis-shard' is missing: pod skipped "
        "(default/x-0, default/x-1, default/x-2 and 2 more)"
    ]
    report = json.loads(run(["plan", "-f", dump, "-o", "json"]).stdout)
    assert [s["object"] for s in report["skipped"]] == [f"pod default/x-{i}" for i in range(5)]


def test_a_shard_with_two_masters_is_an_error_line_and_a_hard_violation(tmp_path: Path) -> None:
    pods = [*three_shards()]
    pods[1]["metadata"]["labels"]["redis-role"] = "master"  # shard 0: both members master
    dump = write(tmp_path, three_zones() + pods)
    audit = run(["audit", "-f", dump])
    assert audit.exit_code == 2
    assert "error: shard default/r/0: has 2 masters" in audit.stderr
    assert "shard-roles" in audit.stdout and "runs 2 masters" in audit.stdout
    rebalance = run(["rebalance", "-f", dump])
    assert rebalance.exit_code == 2 and "error: shard default/r/0" in rebalance.stderr
    assert "no changes needed" not in rebalance.stdout
    assert "1 hard violation remains" in rebalance.stdout


def test_unplaced_pods_are_grouped_and_shown_as_unplaced(tmp_path: Path) -> None:
    big = [
        redis_pod(f"b-{s}-{k}", "b", s, None, memory="32Gi") for s in range(10) for k in range(3)
    ]
    result = run(["plan", "-f", write(tmp_path, three_zones() + big)])
    assert result.exit_code == 3
    rows = [line for line in result.stdout.splitlines() if line.startswith("default/b-")]
    assert len(rows) == 30
    assert all(row.split()[4] == "-" and row.split()[-1] == "unplaced" for row in rows)
    section = result.stdout.split("unplaced:\n", 1)[1].split("\n\n", 1)[0].splitlines()
    assert len(section) == 1, section  # one cause, one line
    assert section[0].startswith("  30 pods: ") and "insufficient memory" in section[0]
    assert section[0].endswith("(default/b-0-0, default/b-0-1, default/b-0-2 and 27 more)")


def test_no_masters_means_no_worst_failure_of_nobody(tmp_path: Path) -> None:
    big = [redis_pod("b-0-0", "b", 0, None, memory="32Gi")]
    result = run(["plan", "-f", write(tmp_path, three_zones() + big)])
    assert "worst single failure: none (no masters placed)" in result.stdout
    assert "takes 0%" not in result.stdout and "of -'s" not in result.stdout


def test_audit_prints_no_solver_status(tmp_path: Path) -> None:
    result = run(["audit", "-f", write(tmp_path, three_zones() + three_shards())])
    assert result.exit_code == 0, result.output
    assert "status " not in result.stdout and "bound" not in result.stdout
    assert "running 6  pending 0  violations 0 hard, 0 soft" in result.stdout


@pytest.mark.parametrize("command", [["plan"], ["audit"], ["rebalance"], ["plan", "-o", "json"]])
def test_fewer_than_three_masters_is_warned_about_in_every_report(
    tmp_path: Path, command: list[str]
) -> None:
    two = [p for p in three_shards() if p["metadata"]["labels"]["redis-shard"] != "2"]
    result = run([*command, "-f", write(tmp_path, three_zones() + two)])
    assert result.exit_code == 0, result.output
    assert "warning: Redis cluster default/r has 2 shards, so 2 masters" in result.stderr
    if "json" in command:
        assert json.loads(result.stdout)["warnings"][0].startswith("Redis cluster default/r")


@pytest.mark.parametrize("output", ["table", "json", "html", "map"])
def test_drill_warns_of_fewer_than_three_masters_on_stderr(tmp_path: Path, output: str) -> None:
    """Two masters: losing either loses the majority (exit 1), and the input is warned about."""
    two = [p for p in three_shards() if p["metadata"]["labels"]["redis-shard"] != "2"]
    result = run(["drill", "-f", write(tmp_path, three_zones() + two), "-o", output])
    assert result.exit_code == 1, result.output
    warning = "warning: Redis cluster default/r has 2 shards, so 2 masters"
    assert result.stderr.startswith(warning) and result.stderr.count("\n") == 1
    if output == "json":  # a document for tools lists them, as a plan does
        assert json.loads(result.stdout)["warnings"][0].startswith("Redis cluster default/r")
    else:
        assert "has 2 shards, so 2 masters" not in result.stdout


@pytest.mark.parametrize("command", ["plan", "audit", "rebalance", "drill"])
@pytest.mark.parametrize("output", ["html", "map"])
def test_pictures_leave_input_issues_on_stderr(tmp_path: Path, command: str, output: str) -> None:
    """A node without a zone label and a Redis cluster of 2 masters: warnings on stderr, none in
    the picture, and no exit code changed by them."""
    nodes = three_zones()
    nodes.append(node("n3", "a", "r3"))
    del nodes[-1]["metadata"]["labels"]["topology.kubernetes.io/zone"]
    two = [p for p in three_shards() if p["metadata"]["labels"]["redis-shard"] != "2"]
    dump = write(tmp_path, nodes + two)
    result = run([command, "-f", dump, "-o", output])
    table = run([command, "-f", dump])
    assert result.exit_code == table.exit_code and result.exit_code in (0, 1), result.output
    warnings = result.stderr.splitlines()
    assert warnings == table.stderr.splitlines() and len(warnings) == 2, result.stderr
    assert all(line.startswith("warning: ") for line in warnings)
    assert "node n3" in result.stderr and "2 masters" in result.stderr
    for line in warnings:
        assert line.removeprefix("warning: ") not in result.stdout
    assert "input errors" not in result.stdout and "warning" not in result.stdout.lower()
    if output == "html":
        assert result.stdout.startswith("<!DOCTYPE html>")
    else:
        assert "zone a" in result.stdout


def test_no_report_prints_an_empty_zone_name(tmp_path: Path) -> None:
    blank = three_zones()
    for n in blank[1:]:
        n["metadata"]["labels"]["topology.kubernetes.io/zone"] = ""
    pods = [redis_pod("r-0-0", "r", 0, "master", node="n1"), redis_pod("r-0-1", "r", 0, None)]
    for command in (["plan"], ["audit"]):
        result = run([*command, "-f", write(tmp_path, blank + pods)])
        for text in (result.stdout, result.stderr):
            assert "zone  " not in text.replace("ZONE  ", "") and "zone None" not in text
        assert "label 'topology.kubernetes.io/zone' (zone) is empty" in result.stderr


# --------------------------------------------------------------------------- rebalance honesty


def test_capped_rebalance_reports_what_remains(tmp_path: Path) -> None:
    dump = two_masters_on_one_node(tmp_path)
    capped = ["rebalance", "-f", dump, "--max-moves", "0", "--max-failovers", "0"]
    table = run(capped)
    assert table.exit_code == 1, table.output
    assert "no changes needed" not in table.stdout
    assert "1 planned change left for later runs" in table.stdout
    assert "no change planned: 1 hard violation remains" in table.stdout
    report = json.loads(run([*capped, "-o", "json"]).stdout)
    assert report["changes"] == []
    assert [c["kind"] for c in report["changesLeftOut"]] == ["failover"]
    assert [v["rule"] for v in report["violationsAfterPlan"] if v["severity"] == "hard"] == [
        "master-exclusivity"
    ]
    uncapped = json.loads(run(["rebalance", "-f", dump, "-o", "json"]).stdout)
    assert [v for v in uncapped["violationsAfterPlan"] if v["severity"] == "hard"] == []


def moving_master() -> list[dict[str, Any]]:
    """Shard 0's master shares n1 with its replica, which a nodeSelector holds there: the master
    must leave n1, and a running master leaves only after a failover."""
    nodes = [node("n1", "a", "a1"), node("n2", "b", "b1"), node("n3", "c", "c1")]
    nodes.append(node("n4", "a", "a2"))
    pinned: dict[str, Any] = {"nodeSelector": {"kubernetes.io/hostname": "n1"}}
    pods = [
        redis_pod("r-0-0", "r", 0, "master", node="n1"),
        redis_pod("r-0-1", "r", 0, "replica", node="n1", **pinned),
        redis_pod("r-1-0", "r", 1, "master", node="n3"),
        redis_pod("r-1-1", "r", 1, "replica", node="n2"),
        redis_pod("r-2-0", "r", 2, "master", node="n2"),
        redis_pod("r-2-1", "r", 2, "replica", node="n3"),
    ]
    return nodes + pods


def test_plan_mode_rebalance_and_rebalance_agree(tmp_path: Path) -> None:
    dump = write(tmp_path, moving_master())
    plan = json.loads(run(["plan", "--mode", "rebalance", "-f", dump, "-o", "json"]).stdout)
    report = json.loads(run(["rebalance", "-f", dump, "--max-moves", "99", "-o", "json"]).stdout)
    planned = [(f"{f['cluster']}/{f['shard']}", f["from"], f["to"]) for f in plan["failovers"]] + [
        (a["pod"], a["fromNode"], a["node"]) for a in plan["assignments"] if a["action"] == "move"
    ]
    changed = [
        (c["shard"], c["from"], c["to"])
        if c["kind"] == "failover"
        else (c["pod"], c["from"], c["to"])
        for c in report["changes"]
    ]
    assert planned == changed
    assert ("default/r/0", "default/r-0-0", "default/r-0-1") in planned  # the guard is visible
    hard = sorted(v["message"] for v in plan["violations"] if v["severity"] == "hard")
    assert hard == sorted(
        v["message"] for v in report["violationsAfterPlan"] if v["severity"] == "hard"
    )
    roles = {a["pod"]: a["role"] for a in plan["assignments"]}
    assert roles["default/r-0-0"] == "replica" and roles["default/r-0-1"] == "master"
