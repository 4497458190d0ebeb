"""The bad-input corpus (tests/bad_inputs/, one small file per class; binary ones are made here)
through the real commands: the exit code, one ``error:`` line naming the object and field, no
healthy report on stdout, and nothing written: no file, and no call that changes a cluster.
"""

import copy
import gzip
import hashlib
import html
import json
import os
import random
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner, Result

from placer.cli import main
from placer.kube.fake import FakeKubeAdapter

CORPUS = Path(__file__).resolve().parent / "bad_inputs"
HEALTHY = "selector-typo.yaml"
"""A clean dump under the default policy (its selector typo is in its policy file)."""


@dataclass(frozen=True)
class Case:
    dump: str
    says: tuple[str, ...]
    """What stderr must name: the object, then the field or cause."""
    policy: str | None = None
    fatal: bool = True
    """One line on stderr and nothing on stdout; otherwise a report of what could be trusted."""
    live: tuple[str, ...] | None = None
    """The same objects can sit in a cluster: also run against the fake adapter, where stderr
    must name these."""
    stdin: bool = False
    pods_wanted: bool = False
    """Bad only for a command that judges Redis pods: ``headroom`` judges the nodes alone."""
    code: int | None = 2
    """The exit code; 2 is an input error, anything else a report whose cause is warned of
    (None: the report's own verdict, 0 or 1, as the input reads)."""


LIVE = ("",)
"""Live, and stderr names what it names for the dump."""


def refused(dump: str, *says: str, live: tuple[str, ...] | None = None) -> Case:
    """Input refused as a whole: one line, nothing on stdout."""
    return Case(dump, says, live=live)


def partial(dump: str, *says: str) -> Case:
    """An object that cannot be trusted: left out, the rest reported; the same in a cluster."""
    return Case(dump, says, fatal=False, live=LIVE)


def warned(dump: str, *says: str, policy: str | None = None, code: int | None = 0) -> Case:
    """Input the tool reads whole but cannot judge whole, or reads under a setting the input
    contradicts: a ``warning:`` names the cause and the report goes on; the same in a
    cluster."""
    return Case(dump, says, policy=policy, fatal=False, live=LIVE, code=code)


CASES = {
    "empty file": Case(
        "empty.yaml",
        ("empty.yaml: holds no objects", "--allow-empty"),
        live=("cluster: holds no Node objects", "may these credentials list nodes?"),
    ),
    "comments only": Case("comments-only.yaml", ("comments-only.yaml: holds no objects",)),
    "other kinds only": Case(
        "other-kinds-only.yaml", ("holds no Node objects", "1 ConfigMap, 1 Service")
    ),
    "items null": Case("items-null.yaml", ("items-null.yaml: holds no objects",)),
    "empty stdin": Case("empty.yaml", ("stdin: holds no objects",), stdin=True),
    "selector matches no pod": Case(
        HEALTHY,
        ("selector: no pod matches the policy selector app=valkey", "app is redis"),
        policy="selector-typo.policy.yaml",
        live=("cluster: selector: no pod matches the policy selector app=valkey",),
        pods_wanted=True,
    ),
    "negative request": refused(
        "negative-request.yaml",
        "pod default/r-0-0",
        "spec.containers[0].resources.requests.memory",
        "negative",
        live=LIVE,
    ),
    "negative allocatable": refused(
        "negative-allocatable.yaml", "node n0", "status.allocatable.memory", "negative", live=LIVE
    ),
    "leading space in a quantity": refused(
        "leading-space-quantity.yaml", "node n1", "status.allocatable.cpu", "no spaces"
    ),
    "huge quantity": refused(
        "huge-quantity.yaml",
        "node n2",
        "status.allocatable.memory",
        "larger than Kubernetes can hold",
        live=LIVE,
    ),
    "malformed quantity": refused(
        "malformed-quantity.yaml",
        "pod default/r-0-0",
        "spec.containers[0].resources.requests.cpu",
        "'lots'",
    ),
    "item without kind": Case("item-without-kind.yaml", ("object default/r-1-1", "kind")),
    "kind a list": refused("kind-a-list.yaml", "object default/r-0-0", "kind", "not a list"),
    "kind in lower case": refused("kind-lower-case.yaml", "kind", "'pod' is not a kind", "'Pod'"),
    "phase a mapping": refused(
        "phase-a-mapping.yaml", "pod default/r-0-0", "status.phase", "not a mapping"
    ),
    "zone label a mapping": refused(
        "zone-label-a-mapping.yaml",
        "node n0",
        "metadata.labels.topology.kubernetes.io/zone",
        "must be a string",
    ),
    "tolerations a string": refused(
        "tolerations-a-string.yaml", "pod default/r-0-0", "spec.tolerations", "must be a list"
    ),
    "unschedulable a string": refused(
        "unschedulable-a-string.yaml", "node n0", "spec.unschedulable", "true or false"
    ),
    "namespace a list": refused(
        "namespace-a-list.yaml", "pod", "metadata.namespace", "must be a string, not a list"
    ),
    "spec null": refused("spec-null.yaml", "pod default/r-0-0", "spec", "is missing"),
    "YAML alias bomb": refused("yaml-alias-bomb.yaml", "yaml-alias-bomb.yaml", "YAML alias"),
    "pods on nodes the dump lacks": Case(
        "pods-on-missing-nodes.yaml",
        ("pods-on-missing-nodes.yaml", "bound to one it does not hold (gone", "--allow-empty"),
        pods_wanted=True,
    ),
    "duplicate node": Case("duplicate-node.yaml", ("node n0", "appears twice")),
    "malformed YAML": Case("malformed-yaml.yaml", ("malformed-yaml.yaml", "not valid YAML")),
    "not an object": Case("not-an-object.yaml", ("not-an-object.yaml", "document 0 is a str")),
    "no zone labels": partial(
        "no-zone-labels.yaml",
        "cluster",
        "every node lacks the zone label 'topology.kubernetes.io/zone'",
    ),
    "one zone label missing": warned(
        "one-zone-label-missing.yaml",
        "node n2",
        "label 'topology.kubernetes.io/zone' (zone) is missing",
    ),
    "replica count the pods contradict": warned(
        "replicas-contradicted.yaml",
        "statefulset default/rb-redis-cluster",
        "9 pods",
        "identity.replicasPerShard 1",
        "set identity.replicasPerShard: 2",
        policy="replicas-contradicted.policy.yaml",
        code=None,
    ),
    "two masters in a shard": partial("two-masters.yaml", "shard default/r/0", "2 masters"),
    "missing shard label": partial(
        "missing-shard-label.yaml", "pod default/r-1-0", "label 'redis-shard' is missing"
    ),
    "missing cluster label": partial(
        "missing-cluster-label.yaml", "pod default/r-2-0", "label 'redis-cluster' is missing"
    ),
    "bad shard-size annotation": partial(
        "bad-shard-size.yaml", "pod default/r-0-0", "redis-placer.io/shard-size='two'"
    ),
    "unknown role": partial("unknown-role.yaml", "pod default/r-2-1", "redis-role='leader'"),
    "unknown policy key": Case(
        HEALTHY,
        ("policy unknown-policy-key.policy.yaml", "rules.maxMasterPerNode", "unknown key"),
        policy="unknown-policy-key.policy.yaml",
    ),
    "policy key written twice": Case(
        HEALTHY,
        ("policy duplicate-key.policy.yaml", "key 'rules' appears twice (again on line 4)"),
        policy="duplicate-key.policy.yaml",
    ),
    "contradictory policy": Case(
        HEALTHY,
        ("policy contradictory.policy.yaml", "rules.survive", "topology.zone names no label"),
        policy="contradictory.policy.yaml",
    ),
}


def _healthy_text() -> str:
    return (CORPUS / HEALTHY).read_text()


GENERATED: dict[str, tuple[Callable[[], bytes], tuple[str, ...]]] = {
    "gzip.yaml.gz": (lambda: gzip.compress(_healthy_text().encode()), ("is gzip-compressed",)),
    "latin1.yaml": (
        lambda: _healthy_text().replace("name: n0", "name: nœud-é").encode("latin-1", "replace"),
        ("is not UTF-8 text", "byte 0xe9"),
    ),
    "utf16.yaml": (lambda: _healthy_text().encode("utf-16"), ("is UTF-16 text",)),
    "binary.bin": (lambda: b"\x7fELF\x02\x01\x01\x00" + bytes(range(256)) * 8, ("binary data",)),
    "random.bin": (
        lambda: bytes(random.Random(7).getrandbits(8) | 0x80 for _ in range(4096)),
        ("is not UTF-8 text",),
    ),
    "deep.json": (lambda: ("[" * 100_000 + "]" * 100_000).encode(), ("nested too deeply",)),
    "deep.yaml": (
        lambda: ("kind: List\nitems:\n- x: " + "[" * 100_000 + "]" * 100_000).encode(),
        ("nested too deeply",),
    ),
}

HEADROOM = ["headroom", "--shard-size", "2", "--cpu", "100m", "--memory", "1Gi"]
COMMANDS = [
    ["plan"],
    ["audit"],
    ["rebalance"],
    ["plan", "--mode", "rebalance", "-o", "json"],
    ["drill"],
    ["drill", "-o", "json"],
    HEADROOM,
    ["headroom", *HEADROOM[1:], "-o", "json"],
    ["pdbs"],
    ["audit", "-o", "html"],
    ["drill", "-o", "map"],
]
NODES_ONLY = {"headroom"}
"""Commands that judge the nodes alone: an input without Redis pods is their question."""


def command_id(command: list[str]) -> str:
    options = [a for a in command if a in ("json", "html", "map", "rebalance")]
    return " ".join([command[0], *options])


def cases_for(commands: list[list[str]], names: list[str]) -> list[tuple[str, list[str]]]:
    """Each case with each command it applies to."""
    return [
        (name, command)
        for name in names
        for command in commands
        if not (CASES[name].pods_wanted and command[0] in NODES_ONLY)
    ]


def pair_id(pair: tuple[str, list[str]]) -> str:
    return f"{pair[0]}-{command_id(pair[1])}"


def tree(folder: Path) -> dict[str, str]:
    """Every file below ``folder`` and a digest of its content."""
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


def run_in(folder: Path, args: list[str], stdin: bytes | None = None) -> Result:
    """The command with ``folder`` (holding its inputs) as working directory; it must leave
    every file there as it was and add none."""
    before = tree(folder)
    cwd = os.getcwd()
    os.chdir(folder)
    try:
        result = CliRunner().invoke(main, args, input=stdin)
    finally:
        os.chdir(cwd)
    assert tree(folder) == before, "the command wrote a file"
    return result


def check_report(
    result: Result,
    case_says: tuple[str, ...],
    fatal: bool,
    args: list[str],
    code: int | None = 2,
) -> None:
    assert result.exit_code == code or (code is None and result.exit_code in (0, 1)), (
        args,
        result.output,
    )
    assert "Traceback" not in result.output
    kind = "error: " if code == 2 else "warning: "
    errors = [line for line in result.stderr.splitlines() if line.startswith(kind)]
    assert errors, result.stderr
    assert any(all(s in line for s in case_says) for line in errors), (case_says, errors)
    for line in errors:  # on stderr only, never in the report
        assert line.removeprefix(kind) not in result.stdout, line
    if code != 2:
        assert result.stdout, args
    elif fatal:
        assert result.stdout == "" and len(result.stderr.splitlines()) == 1, result.output
    elif "json" in args:
        document = json.loads(result.stdout)
        assert any(s.get("severity") == "error" for s in document["skipped"])
    else:
        assert "input errors: " in result.stdout and "this report is incomplete" in result.stdout


@pytest.mark.parametrize("pair", cases_for(COMMANDS, list(CASES)), ids=pair_id)
def test_bad_dump(tmp_path: Path, pair: tuple[str, list[str]]) -> None:
    name, command = pair
    case = CASES[name]
    shutil.copy(CORPUS / case.dump, tmp_path / case.dump)
    args = [*command]
    if case.policy:
        shutil.copy(CORPUS / case.policy, tmp_path / case.policy)
        args += ["-p", case.policy]
    stdin = None
    if case.stdin:
        args += ["-f", "-"]
        stdin = (CORPUS / case.dump).read_bytes()
    else:
        args += ["-f", case.dump]
    check_report(run_in(tmp_path, args, stdin), case.says, case.fatal, args, case.code)


UNLABELLED = {
    "no-zone-labels.yaml": ("nodes n0, n1, n2", 2),
    "one-zone-label-missing.yaml": ("node n2", 0),
}
"""Dumps whose nodes holding Redis pods lack the zone label: the nodes named, the exit code."""
SAID_HEALTHY = (
    "no violations\n",
    "violations: none<",
    "violations before: none<",
    "survives losing one zone: yes",
    "nothing to judge: no Redis pod is on a node",
    "a third zone would",
)


@pytest.mark.parametrize(
    "command",
    [
        ["audit"],
        ["audit", "-o", "html"],
        ["plan"],
        ["plan", "-o", "html"],
        ["rebalance"],
        ["rebalance", "-o", "html"],
        ["drill"],
    ],
    ids=" ".join,
)
@pytest.mark.parametrize("dump", UNLABELLED)
def test_nodes_without_the_zone_label_are_named_first_and_never_healthy(
    tmp_path: Path, dump: str, command: list[str]
) -> None:
    """The zone level cannot be judged where Redis pods run on nodes without the zone label: the
    report names those nodes before any verdict, and nothing says the level is healthy, or that
    a zone is missing that only lacks its label."""
    nodes, code = UNLABELLED[dump]
    shutil.copy(CORPUS / dump, tmp_path / dump)
    result = run_in(tmp_path, [*command, "-f", dump])
    assert result.exit_code == code, result.output
    text = html.unescape(result.stdout)
    for words in SAID_HEALTHY:
        assert words not in text, (words, text)
    cause = f"zone unknown: {nodes} "
    assert cause in text and text.index(cause) < text.find("survives losing one") % len(text)
    if command in (["audit"], ["rebalance"]):
        assert text.startswith(cause), text
    if command[0] != "drill":
        assert "not judged: losing one zone" in text or "survives losing one zone: not" in text


@pytest.mark.parametrize("dump", UNLABELLED)
def test_a_level_not_judged_is_not_survived_in_the_document(tmp_path: Path, dump: str) -> None:
    shutil.copy(CORPUS / dump, tmp_path / dump)
    result = run_in(tmp_path, ["audit", "-o", "json", "-f", dump])
    zone = json.loads(result.stdout)["survival"][-1]
    names = UNLABELLED[dump][0].split(" ", 1)[1].split(", ")
    assert zone["level"] == "zone" and zone["survived"] is False
    assert zone["unlabelledRunning"] == names and zone["cannotSurvive"] == []
    assert zone["label"] == "topology.kubernetes.io/zone"


def test_headroom_sizes_the_nodes_when_the_selector_picks_no_pod(tmp_path: Path) -> None:
    """A cluster without Redis pods is headroom's question, not an input with nothing in it; an
    existing Redis cluster to copy that the selector does not see is still an error."""
    case = CASES["selector matches no pod"]
    assert case.policy is not None
    shutil.copy(CORPUS / case.dump, tmp_path / case.dump)
    shutil.copy(CORPUS / case.policy, tmp_path / case.policy)
    args = [*HEADROOM, "-f", case.dump, "-p", case.policy]
    new = run_in(tmp_path, [*args, "-o", "json"])
    assert new.exit_code == 0 and new.stderr == "", new.output
    answer = json.loads(new.stdout)
    assert answer["cluster"] == "default/headroom" and answer["shards"] > 0
    join = ["headroom", "--shard-size", "2", "--cluster", "default/r", "-f", case.dump]
    joined = run_in(tmp_path, [*join, "-p", case.policy])
    check_report(joined, ("--cluster", "Redis cluster default/r is not in the input"), True, join)


@pytest.mark.parametrize("command", COMMANDS, ids=command_id)
@pytest.mark.parametrize("name", GENERATED)
def test_bytes_that_are_not_a_dump(tmp_path: Path, name: str, command: list[str]) -> None:
    make, says = GENERATED[name]
    data = make()
    (tmp_path / name).write_bytes(data)
    check_report(run_in(tmp_path, [*command, "-f", name]), (name, *says), True, command)
    on_stdin = run_in(tmp_path, [*command, "-f", "-"], stdin=data)
    check_report(on_stdin, ("stdin", *says), True, command)


@pytest.mark.parametrize("name", ["binary.bin", "gzip.yaml.gz", "latin1.yaml"])
def test_a_policy_file_that_is_not_text(tmp_path: Path, name: str) -> None:
    make, says = GENERATED[name]
    (tmp_path / name).write_bytes(make())
    shutil.copy(CORPUS / HEALTHY, tmp_path / HEALTHY)
    for args in (["plan", "-f", HEALTHY, "-p", name], ["policy", "validate", "-p", name]):
        check_report(run_in(tmp_path, args), (f"policy {name}", *says), True, args)


@pytest.mark.parametrize(
    "name", [n for n, c in CASES.items() if c.policy], ids=lambda n: n.replace(" ", "-")
)
def test_policy_validate_on_the_corpus(tmp_path: Path, name: str) -> None:
    case = CASES[name]
    assert case.policy is not None
    shutil.copy(CORPUS / case.policy, tmp_path / case.policy)
    result = run_in(tmp_path, ["policy", "validate", "-p", case.policy])
    if "selector" in name or case.code != 2:  # valid: what is wrong shows only against the pods
        assert result.exit_code == 0 and result.stdout.endswith(": valid\n")
    else:
        check_report(result, case.says, True, ["policy", "validate"])


# --------------------------------------------------------------------------- live cluster


def fake_cluster(case: Case) -> FakeKubeAdapter:
    items = (yaml.safe_load((CORPUS / case.dump).read_text()) or {}).get("items") or []
    return FakeKubeAdapter(
        nodes=[o for o in items if o.get("kind") == "Node"],
        pods=[o for o in items if o.get("kind") == "Pod"],
    )


LIVE_COMMANDS = [
    ["plan"],
    ["audit"],
    ["rebalance"],
    ["rebalance", "--apply", "--max-moves", "9", "--report-configmap", "redis-placer/report"],
    ["drill"],
    HEADROOM,
    ["pdbs"],
]


@pytest.mark.parametrize(
    "pair",
    cases_for(LIVE_COMMANDS, [n for n, c in CASES.items() if c.live]),
    ids=lambda p: f"{p[0]}-{' '.join(p[1][:2])}",
)
def test_bad_cluster_changes_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, pair: tuple[str, list[str]]
) -> None:
    name, command = pair
    case = CASES[name]
    kube = fake_cluster(case)
    pods, nodes = copy.deepcopy(kube.pods), copy.deepcopy(kube.nodes)
    monkeypatch.setattr("placer.inputs.live.connect", lambda kubeconfig, context, **_: kube)
    args = [*command]
    if case.policy:
        shutil.copy(CORPUS / case.policy, tmp_path / case.policy)
        args += ["-p", case.policy]
    result = run_in(tmp_path, args)
    says = case.says if case.live == LIVE else case.live
    assert says is not None
    check_report(result, says, case.fatal, args, case.code)
    assert kube.evicted == [] and kube.binds == [] and kube.events == []
    assert kube.configmaps == {}
    assert kube.pods == pods and kube.nodes == nodes


def test_the_corpus_files_are_all_used() -> None:
    used = {c.dump for c in CASES.values()} | {c.policy for c in CASES.values() if c.policy}
    assert used == {p.name for p in CORPUS.iterdir() if p.suffix == ".yaml"}
