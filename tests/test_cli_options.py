"""The command line's shared conventions, as kubectl has them: ``-n`` narrows to a namespace,
``-o json|yaml`` wherever a report is printed, ``--dry-run`` beside ``--apply``, ``-p`` for a
policy and ``FILE`` for a file, help on every option, the commands a mistyped one is close to,
and no Kubernetes client imported where no cluster is read."""

import json
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import click
import pytest
import yaml
from click.testing import CliRunner

from models.kube_objects import build_snapshot
from models.policy import Policy
from placer.cli import main
from placer.inputs.live import snapshot_from_adapter
from placer.kube.fake import FakeKubeAdapter
from tests.kube_dicts import node, redis_pod
from tests.test_cli_contract import ROOT, one_error_line, run, write

EXAMPLE = str(ROOT / "placer" / "examples" / "three-zones.yaml")
REBALANCE_EXAMPLE = str(ROOT / "placer" / "examples" / "rebalance.yaml")


# --------------------------------------------------------------------------- start-up


def _alone(args: list[str]) -> tuple[int, bool]:
    """Run a command in a fresh interpreter: its exit code and whether the Kubernetes client
    was imported."""
    code = textwrap.dedent(
        f"""
        import sys
        from click.testing import CliRunner
        from placer.cli import main
        result = CliRunner().invoke(main, {args!r})
        assert result.exception is None or isinstance(result.exception, SystemExit), result.output
        print(result.exit_code, "kubernetes" in sys.modules)
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    exit_code, imported = done.stdout.split()
    return int(exit_code), imported == "True"


@pytest.mark.parametrize(
    "args",
    [
        ["pdbs", "-f", EXAMPLE],
        ["pdbs", "-f", "/dev/null"],
        ["audit", "-f", EXAMPLE],
        ["drill", "-f", EXAMPLE],
        ["rebalance", "-f", EXAMPLE, "--time-limit", "5"],
        ["release-gates", "--help"],
    ],
    ids=" ".join,
)
def test_a_command_that_reads_no_cluster_imports_no_kubernetes_client(args: list[str]) -> None:
    exit_code, imported = _alone(args)
    assert exit_code in (0, 1, 2)
    assert not imported


def test_a_live_read_still_imports_the_client_when_it_connects() -> None:
    from placer.kube import KubernetesAdapter

    assert KubernetesAdapter.__module__ == "placer.kube.adapter"


# --------------------------------------------------------------------------- did you mean


@pytest.mark.parametrize(
    ("typed", "meant"),
    [
        ("plann", "'plan'"),
        ("PLAN", "'plan'"),
        ("audti", "'audit'"),
        ("pdb", "'pdbs'"),
        ("reb", "'rebalance'"),
        ("re", "one of 'rebalance', 'release-gates'"),
    ],
)
def test_a_mistyped_command_names_the_commands_it_is_close_to(typed: str, meant: str) -> None:
    line = one_error_line(run([typed]))
    assert line.split(" (see ")[0] == f"error: No such command {typed!r}. Did you mean {meant}?"


def test_a_name_close_to_nothing_gets_no_suggestion() -> None:
    line = one_error_line(run(["xyzzy"]))
    assert line.split(" (see ")[0] == "error: No such command 'xyzzy'."


def test_completion_of_a_partial_command_is_not_an_error() -> None:
    result = CliRunner().invoke(
        main,
        [],
        env={
            "_REDIS_PLACER_COMPLETE": "bash_complete",
            "COMP_WORDS": "redis-placer re",
            "COMP_CWORD": "1",
        },
        prog_name="redis-placer",
    )
    assert result.exit_code == 0, result.output
    assert "rebalance" in result.output and "release-gates" in result.output


# --------------------------------------------------------------------------- help


def _every_option() -> list[tuple[str, click.Option]]:
    found: list[tuple[str, click.Option]] = []

    def walk(command: click.Command, ctx: click.Context, path: str) -> None:
        for param in command.get_params(ctx):
            if isinstance(param, click.Option) and not param.hidden:
                found.append((f"{path} {param.opts[-1]}", param))
        if isinstance(command, click.Group):
            for name in command.list_commands(ctx):
                sub = command.get_command(ctx, name)
                assert sub is not None
                walk(sub, click.Context(sub, info_name=name, parent=ctx), f"{path} {name}")

    walk(main, click.Context(main, info_name="redis-placer"), "redis-placer")
    return found


def test_every_option_has_help() -> None:
    options = _every_option()
    named = {path.split()[-1] for path, _ in options}
    for wanted in ("--metrics-port", "--lease-namespace", "--lease-name", "--failover-timeout"):
        assert wanted in named
    assert [path for path, option in options if not option.help] == []


def test_every_output_option_says_what_each_value_prints() -> None:
    outputs = [(path, o) for path, o in _every_option() if "--output" in o.opts]
    assert len(outputs) >= 9
    for path, option in outputs:
        assert isinstance(option.type, click.Choice), path
        for value in option.type.choices:
            assert str(value) in (option.help or ""), f"{path}: {value} unexplained"


@pytest.mark.parametrize(
    ("args", "shown"),
    [
        (["plan"], "-f, --file FILE"),
        (["audit"], "-f, --file FILE"),
        (["demo"], "-f, --file FILE"),
        (["drill"], "--plan FILE"),
        (["drill"], "-p, --policy FILE"),
        (["policy", "validate"], "-p, --policy FILE"),
    ],
)
def test_files_show_file_as_their_metavar(args: list[str], shown: str) -> None:
    result = run([*args, "--help"])
    assert result.exit_code == 0
    assert shown in result.stdout


# --------------------------------------------------------------------------- -n/--namespace


def two_namespaces(b_on_one_host: bool = False) -> list[dict[str, Any]]:
    """Three zones, and a Redis cluster of three shards in each of namespaces ``a`` and ``b``:
    a's shard 0 has both members on n0 (shard-spread), b's shards are spread (unless
    ``b_on_one_host``: then b's shard 0 is on n0 too)."""
    nodes = [node(f"n{i}", "abc"[i], f"r{i}", memory="64Gi", cpu="16") for i in range(3)]
    pods = []
    for ns in ("a", "b"):
        for s in range(3):
            on_one_host = s == 0 and (ns == "a" or b_on_one_host)
            replica_node = s if on_one_host else (s + 1) % 3
            pods.append(redis_pod(f"{ns}-{s}-0", "r", s, "master", node=f"n{s}", namespace=ns))
            pods.append(
                redis_pod(f"{ns}-{s}-1", "r", s, "replica", node=f"n{replica_node}", namespace=ns)
            )
    for pod in pods:
        pod["status"]["conditions"] = [{"type": "Ready", "status": "True"}]
    return [*nodes, *pods]


def test_a_namespace_makes_the_redis_pods_of_others_load_only() -> None:
    snapshot = build_snapshot(two_namespaces(), Policy(), namespace="b")
    assert {m.pod.namespace for m in snapshot.members} == {"b"} and len(snapshot.members) == 6
    assert {p.namespace for p in snapshot.other_pods} == {"a"} and len(snapshot.other_pods) == 6
    everything = build_snapshot(two_namespaces(), Policy())
    assert len(everything.members) == 12 and everything.other_pods == ()


@pytest.mark.parametrize("command", [["audit"], ["drill"], ["rebalance"], ["pdbs"]], ids=" ".join)
def test_namespace_narrows_a_command_to_that_namespaces_redis_pods(
    tmp_path: Path, command: list[str]
) -> None:
    dump = write(tmp_path, two_namespaces())
    both = run([*command, "-f", dump, "-o", "json"])
    only_a = run([*command, "-n", "a", "-f", dump, "-o", "json"])
    only_b = run([*command, "-n", "b", "-f", dump, "-o", "json"])
    assert only_a.stderr == only_b.stderr == "", only_a.stderr + only_b.stderr

    def mentions(text: str, ns: str) -> bool:  # a PDB's namespace, a cluster or a pod
        return any(m in text for m in (f'"namespace": "{ns}"', f'"{ns}/r"', f"{ns}/{ns}-"))

    assert mentions(both.stdout, "a") and mentions(both.stdout, "b")
    assert mentions(only_a.stdout, "a") and not mentions(only_a.stdout, "b")
    assert not mentions(only_b.stdout, "a")
    if command == ["pdbs"]:
        assert len(json.loads(only_b.stdout)["items"]) == 3
        return
    # Two masters share each node, and a's shard 0 lies on one host: hard violations, or a lost
    # shard; b alone, its masters one a node, has none, and a alone only its shard 0.
    assert both.exit_code == 1, both.output
    assert only_b.exit_code == 0, only_b.output
    if command == ["rebalance"]:  # its exit code is what the plan leaves: a's move fixes a
        assert [c["shard"] for c in json.loads(only_a.stdout)["changes"]] == ["a/r/0"]
        assert json.loads(only_b.stdout)["changes"] == []
    else:
        assert only_a.exit_code == 1, only_a.output


def test_namespace_long_form_and_the_audit_table(tmp_path: Path) -> None:
    dump = write(tmp_path, two_namespaces())
    result = run(["audit", "--namespace", "a", "-f", dump])
    assert result.exit_code == 1, result.output
    assert "shard-spread" in result.stdout and "b/" not in result.stdout


def test_a_namespace_without_redis_pods_is_one_line_naming_the_option(tmp_path: Path) -> None:
    dump = write(tmp_path, two_namespaces())
    line = one_error_line(run(["audit", "-n", "c", "-f", dump]))
    assert line == (
        f"error: {dump}: --namespace: no pod the policy selector app=redis matches is in "
        "namespace 'c' (12 in a, b): nothing to judge; pass --allow-empty to accept it\n"
    )
    assert run(["pdbs", "-n", "c", "-f", dump, "--allow-empty"]).exit_code == 0


def test_drill_of_a_plan_in_a_namespace_drills_that_namespaces_pods(tmp_path: Path) -> None:
    dump = write(tmp_path, two_namespaces())
    plan = run(["plan", "-f", dump, "-o", "json"])
    plan_path = tmp_path / "plan.json"
    plan_path.write_text(plan.stdout)
    result = run(["drill", "-n", "b", "-f", dump, "--plan", str(plan_path), "-o", "json"])
    assert result.exit_code == 0, result.output
    assert result.stderr == ""  # a's pods of the plan are not "missing from the snapshot"
    report = json.loads(result.stdout)
    assert report["members"] == 6
    assert {c["cluster"] for f in report["failures"] for c in f["clusters"]} == {"b/r"}


class Recording(FakeKubeAdapter):
    """A fake that notes the namespace each StatefulSet list was asked for."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.statefulset_lists: list[str | None] = []

    def list_statefulsets(
        self, namespace: str | None = None, label_selector: str | None = None
    ) -> list[dict[str, Any]]:
        self.statefulset_lists.append(namespace)
        return super().list_statefulsets(namespace, label_selector)


def _fake(objects: list[dict[str, Any]]) -> Recording:
    return Recording(
        nodes=[o for o in objects if o["kind"] == "Node"],
        pods=[o for o in objects if o["kind"] == "Pod"],
    )


def test_a_live_read_in_a_namespace_lists_its_statefulsets_and_every_pod() -> None:
    fake = _fake(two_namespaces())
    snapshot = snapshot_from_adapter(fake, Policy(), namespace="a")
    assert fake.statefulset_lists == ["a"]
    assert {m.pod.namespace for m in snapshot.members} == {"a"} and len(snapshot.members) == 6
    assert len(snapshot.other_pods) == 6  # b's pods: their room on the nodes counts


def test_rebalance_apply_in_a_namespace_changes_that_namespace_only(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # b's shard 0 on one host too: without -n, rebalance would move one of b's pods as well
    kube = _fake(two_namespaces(b_on_one_host=True))
    monkeypatch.setattr("placer.rebalance.command.make_adapter", lambda kubeconfig, context: kube)
    result = CliRunner().invoke(
        main, ["rebalance", "--apply", "-n", "a", "--max-moves", "2", "-o", "json"]
    )
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert [c["pod"] for c in report["changes"]] in (["a/a-0-0"], ["a/a-0-1"])
    assert [a["target"] for a in report["actions"]] == [report["changes"][0]["pod"]]
    assert kube.statefulset_lists == ["a", "a"]  # read before and after the changes
    assert all(not v["pods"][0].startswith("b/") for v in report["auditAfter"])


def test_release_gates_and_binder_take_n_for_their_namespace() -> None:
    for path, option in _every_option():
        if path.split()[1] in ("release-gates", "binder") and "--namespace" in option.opts:
            assert "-n" in option.opts, path


# --------------------------------------------------------------------------- -o json|yaml


def test_demo_prints_its_comparison_as_json_and_yaml() -> None:
    as_json = run(["demo", "-o", "json"])
    assert as_json.exit_code == 0, as_json.output
    data = json.loads(as_json.stdout)
    assert (data["nodes"], data["pending"]) == (8, 12)
    placements = data["placements"]
    assert set(placements) == {"plan", "greedy", "stockRules"}
    assert placements["plan"]["survival"]["zone"] == {"survives": True, "losing": []}
    assert placements["greedy"]["survival"]["zone"] == {"survives": False, "losing": ["zone-b"]}
    zone_a = next(f for f in data["drill"]["failures"] if f["domain"] == "zone-a")
    assert zone_a["plan"] == {"survives": True, "loses": []}
    assert zone_a["stockRules"]["survives"] is False
    assert data["plan"]["status"] == "OPTIMAL" and len(data["plan"]["assignments"]) == 16
    as_yaml = run(["demo", "-o", "yaml"])
    assert as_yaml.exit_code == 0, as_yaml.output
    again = yaml.safe_load(as_yaml.stdout)
    for d in (data, again):
        d["placements"]["plan"].pop("seconds")
        d["plan"].pop("solveSeconds", None)
    assert again == data


def test_pdbs_takes_table_and_keeps_yaml_as_its_default(tmp_path: Path) -> None:
    default = run(["pdbs", "-f", EXAMPLE])
    assert default.exit_code == 0
    assert default.stdout == run(["pdbs", "-f", EXAMPLE, "-o", "yaml"]).stdout
    assert default.stdout.startswith("---\napiVersion: policy/v1\n")
    table = run(["pdbs", "-f", EXAMPLE, "-o", "table"])
    assert table.exit_code == 0, table.output
    lines = table.stdout.splitlines()
    assert lines[0].split() == ["NAMESPACE", "NAME", "MIN", "AVAILABLE", "SELECTOR"]
    assert lines[1].split() == [
        "redis",
        "cache-shard-0",
        "1",
        "app=redis,redis-cluster=cache,redis-shard=0",
    ]
    assert len(lines) == 1 + len(
        yaml.safe_load(run(["pdbs", "-f", EXAMPLE, "-o", "json"]).stdout)["items"]
    )


def test_pdbs_table_shows_a_selector_by_pod_names() -> None:
    from placer.commands.pdbs import selector_text

    selector = {
        "matchLabels": {"app": "redis"},
        "matchExpressions": [
            {
                "key": "statefulset.kubernetes.io/pod-name",
                "operator": "In",
                "values": ["x-0", "x-1"],
            },
            {"key": "gone", "operator": "DoesNotExist"},
        ],
    }
    assert selector_text(selector) == (
        "app=redis,statefulset.kubernetes.io/pod-name in (x-0,x-1),!gone"
    )


def test_policy_defaults_print_as_json_too() -> None:
    result = run(["policy", "--print-defaults", "-o", "json"])
    assert result.exit_code == 0, result.output
    assert Policy.model_validate(json.loads(result.stdout)) == Policy()
    line = one_error_line(run(["policy", "-o", "json", "validate", "-p", EXAMPLE]))
    assert "-o goes with --print-defaults" in line


def test_release_gates_prints_its_report_as_a_document(monkeypatch: pytest.MonkeyPatch) -> None:
    from tests.test_release_gates import cluster

    fake = cluster()
    monkeypatch.setattr("placer.commands.release_gates.connect", lambda *_, **__: fake)
    result = CliRunner().invoke(main, ["release-gates", "--dry-run", "-o", "json"])
    assert result.exit_code == 1, result.output
    report = json.loads(result.stdout)
    assert report["dryRun"] is True
    assert report["wouldRelease"] == ["redis/ours", "redis/ours-and-theirs"]
    assert report["bindMode"] == ["redis/bind-mode"]
    assert report["released"] == [] and report["leftWaiting"] == 3
    released = CliRunner().invoke(main, ["release-gates", "-n", "redis", "-o", "yaml"])
    done = yaml.safe_load(released.stdout)
    assert [r["pod"] for r in done["released"]] == ["redis/ours", "redis/ours-and-theirs"]
    assert done["leftWaiting"] == 1 and released.exit_code == 1


def test_release_gates_in_another_namespace_finds_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    from tests.test_release_gates import cluster

    fake = cluster()
    monkeypatch.setattr("placer.commands.release_gates.connect", lambda *_, **__: fake)
    result = CliRunner().invoke(main, ["release-gates", "-n", "elsewhere"])
    assert result.exit_code == 0, result.output
    assert result.stdout == "released 0 pod(s); 0 managed pod(s) left waiting\n"


# --------------------------------------------------------------------------- --dry-run


def test_rebalance_dry_run_is_the_default_said_out_loud() -> None:
    default = run(["rebalance", "-f", REBALANCE_EXAMPLE, "-o", "json"])
    explicit = run(["rebalance", "--dry-run", "-f", REBALANCE_EXAMPLE, "-o", "json"])
    assert explicit.exit_code == default.exit_code == 0, explicit.output
    drop = ("plan",)  # the solve's own figures (its time) may differ run to run
    first, second = json.loads(default.stdout), json.loads(explicit.stdout)
    for report in (first, second):
        for key in drop:
            report.pop(key)
    assert first == second and first["apply"] is False and len(first["changes"]) == 2


def test_rebalance_refuses_dry_run_with_apply() -> None:
    line = one_error_line(run(["rebalance", "--dry-run", "--apply"]))
    assert line == (
        "error: --dry-run and --apply contradict each other: give one (without either, a dry run)\n"
    )


# --------------------------------------------------------------------------- policy validate -p


def test_policy_validate_takes_p_and_f_with_a_warning(tmp_path: Path) -> None:
    path = tmp_path / "policy.yaml"
    path.write_text("rules: {survive: zone}\n")
    with_p = run(["policy", "validate", "-p", str(path)])
    assert (with_p.exit_code, with_p.stdout, with_p.stderr) == (0, f"policy {path}: valid\n", "")
    long = run(["policy", "validate", "--policy", str(path)])
    assert long.exit_code == 0 and long.stdout == with_p.stdout
    with_f = run(["policy", "validate", "-f", str(path)])
    assert (with_f.exit_code, with_f.stdout) == (0, with_p.stdout)
    assert with_f.stderr == "warning: policy validate -f is deprecated: give the policy with -p\n"


def test_policy_validate_reads_stdin_with_p() -> None:
    result = run(["policy", "validate", "-p", "-"], stdin="rules: {survive: rack}\n")
    assert result.exit_code == 0 and result.stdout == "policy -: valid\n"


@pytest.mark.parametrize(
    ("args", "says"),
    [
        ([], "give the policy to check with -p FILE"),
        (["-p", "x.yaml", "-f", "x.yaml"], "give the policy once, with -p"),
    ],
)
def test_policy_validate_without_a_policy_or_with_two(args: list[str], says: str) -> None:
    line = one_error_line(run(["policy", "validate", *args]))
    assert says in line
