"""deploy/ renders, validates against Kubernetes' schemas, is Pod-Security "restricted", and
grants exactly the API calls the adapter makes (placer.kube.adapter.REQUIRED_PERMISSIONS)."""

import functools
import os
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml
from kubernetes_validate.utils import all_versions

from models.policy import Policy
from placer.kube.adapter import COMPONENT_CALLS, FLAG_CALLS, Permission, permissions_for

ROOT = Path(__file__).resolve().parent.parent
DEPLOY = ROOT / "deploy"
IMAGE = "ghcr.io/redis-placer/redis-placer:0.1.0"
NAMESPACE = "redis-placer"
POLICY_PATH = "/etc/redis-placer/policy.yaml"
GATE = "redis-placer.io/placement"
COMPONENT_ACCOUNTS = {"binder": "redis-placer-binder", "rebalance": "redis-placer-rebalance"}

Doc = dict[str, Any]


@functools.cache
def render(path: str) -> tuple[Doc, ...]:
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        pytest.skip("kubectl is not on PATH: cannot run `kubectl kustomize`")
    out = subprocess.run(
        [kubectl, "kustomize", str(DEPLOY / path)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert out.returncode == 0, out.stderr
    return tuple(d for d in yaml.safe_load_all(out.stdout) if d)


def main() -> tuple[Doc, ...]:
    return render(".")


@functools.cache
def with_component(name: str) -> tuple[Doc, ...]:
    """deploy/ with one of deploy/components/, as a user's overlay includes it."""
    overlay = Path(tempfile.mkdtemp(prefix="overlay-"))
    (overlay / "kustomization.yaml").write_text(
        yaml.safe_dump(
            {
                "apiVersion": "kustomize.config.k8s.io/v1beta1",
                "kind": "Kustomization",
                "resources": [os.path.relpath(DEPLOY, overlay)],
                "components": [os.path.relpath(DEPLOY / "components" / name, overlay)],
            }
        )
    )
    return render(str(overlay))


def one(docs: tuple[Doc, ...], kind: str, name: str | None = None) -> Doc:
    found = [
        d for d in docs if d["kind"] == kind and (name is None or d["metadata"]["name"] == name)
    ]
    assert len(found) == 1, (kind, name, [d["metadata"]["name"] for d in found])
    return found[0]


def pod_template(workload: Doc) -> Doc:
    if workload["kind"] == "CronJob":
        template: Doc = workload["spec"]["jobTemplate"]["spec"]["template"]
    else:
        template = workload["spec"]["template"]
    return template


# -- files and rendering ---------------------------------------------------------------------


def yaml_files() -> list[Path]:
    return sorted(DEPLOY.rglob("*.yaml"))


@pytest.mark.parametrize("path", yaml_files(), ids=lambda p: str(p.relative_to(DEPLOY)))
def test_every_yaml_file_parses(path: Path) -> None:
    docs = [d for d in yaml.safe_load_all(path.read_text()) if d is not None]
    assert docs, f"{path} is empty"
    for doc in docs:
        assert isinstance(doc, dict)
        if path.name == "kustomization.yaml":
            assert doc["kind"] in ("Kustomization", "Component")
        elif path.name != "policy.yaml":
            assert doc.get("apiVersion") and doc.get("kind"), path
            assert doc["metadata"]["name"], path


def test_every_manifest_file_is_used_by_a_kustomization() -> None:
    listed: set[Path] = set()
    for kustomization in DEPLOY.rglob("kustomization.yaml"):
        doc = yaml.safe_load(kustomization.read_text())
        for entry in doc.get("resources", []):
            listed.add((kustomization.parent / entry).resolve())
        for generator in doc.get("configMapGenerator", []):
            listed.update((kustomization.parent / f).resolve() for f in generator.get("files", []))
    for path in yaml_files():
        if path.name != "kustomization.yaml":
            assert path.resolve() in listed, f"{path} is not referenced by any kustomization"


def test_main_kinds() -> None:
    kinds = sorted((d["kind"], d["metadata"]["name"]) for d in main())
    assert kinds == sorted(
        [
            ("Namespace", "redis-placer"),
            ("ServiceAccount", "redis-placer-binder"),
            ("ServiceAccount", "redis-placer-rebalance"),
            ("ClusterRole", "redis-placer-binder"),
            ("ClusterRole", "redis-placer-rebalance"),
            ("ClusterRoleBinding", "redis-placer-binder"),
            ("ClusterRoleBinding", "redis-placer-rebalance"),
            ("Role", "redis-placer-binder-leader"),
            ("Role", "redis-placer-rebalance-report"),
            ("RoleBinding", "redis-placer-binder-leader"),
            ("RoleBinding", "redis-placer-rebalance-report"),
            ("ConfigMap", "redis-placer-policy"),
            ("Deployment", "redis-placer-binder"),
            ("Service", "redis-placer-metrics"),
            ("PodDisruptionBudget", "redis-placer-binder"),
            ("CronJob", "redis-placer-rebalance"),
        ]
    )
    for doc in main():
        if doc["kind"] not in ("Namespace", "ClusterRole", "ClusterRoleBinding"):
            assert doc["metadata"]["namespace"] == NAMESPACE, doc["metadata"]["name"]


# Scheduling gates, and the pod-scheduling changes a gated pod accepts, are GA from 1.30.
OLDEST_SUPPORTED = (1, 30)


def _schema_versions() -> list[str]:
    """The oldest supported and the newest Kubernetes schemas kubernetes-validate ships."""
    versions = sorted(
        {v for v in all_versions() if tuple(int(x) for x in v.split(".")[:2]) >= OLDEST_SUPPORTED},
        key=lambda v: tuple(int(x) for x in v.split(".")),
    )
    return sorted({versions[0], versions[-1]})


@pytest.mark.parametrize("version", _schema_versions())
@pytest.mark.parametrize("path", [".", "examples/bind", "examples/gate"])
def test_rendered_documents_validate_strictly(path: str, version: str) -> None:
    for doc in render(path):
        try:
            kubernetes_validate.validate(doc, version, strict=True)
        except kubernetes_validate.ValidationError as err:
            pytest.fail(f"{doc['kind']}/{doc['metadata']['name']} against {version}: {err.message}")


# -- Pod Security "restricted" ---------------------------------------------------------------

ALLOWED_VOLUMES = {
    "configMap", "csi", "downwardAPI", "emptyDir", "ephemeral",
    "persistentVolumeClaim", "projected", "secret",
}  # fmt: skip


def restricted_violations(spec: Doc) -> list[str]:
    """The Pod Security Standard "restricted" checks (v1.25+), as the admission plugin runs them."""
    problems: list[str] = []
    pod_sc = spec.get("securityContext") or {}
    for key in ("hostNetwork", "hostPID", "hostIPC"):
        if spec.get(key):
            problems.append(f"{key} is set")
    for volume in spec.get("volumes") or []:
        kinds = set(volume) - {"name"}
        if not kinds <= ALLOWED_VOLUMES:
            problems.append(f"volume {volume['name']} is {kinds}")
    if (pod_sc.get("seccompProfile") or {}).get("type") not in (
        "RuntimeDefault",
        "Localhost",
        None,
    ):
        problems.append("pod seccompProfile is not RuntimeDefault/Localhost")
    if pod_sc.get("runAsUser") == 0:
        problems.append("pod runs as uid 0")
    containers = (spec.get("containers") or []) + (spec.get("initContainers") or [])
    for c in containers:
        sc = c.get("securityContext") or {}
        name = c["name"]
        if sc.get("privileged"):
            problems.append(f"{name}: privileged")
        if sc.get("allowPrivilegeEscalation") is not False:
            problems.append(f"{name}: allowPrivilegeEscalation is not false")
        caps = sc.get("capabilities") or {}
        if "ALL" not in (caps.get("drop") or []):
            problems.append(f"{name}: capabilities do not drop ALL")
        if set(caps.get("add") or []) - {"NET_BIND_SERVICE"}:
            problems.append(f"{name}: adds capabilities")
        if sc.get("runAsNonRoot", pod_sc.get("runAsNonRoot")) is not True:
            problems.append(f"{name}: runAsNonRoot is not true")
        if sc.get("runAsUser") == 0:
            problems.append(f"{name}: runs as uid 0")
        seccomp = (sc.get("seccompProfile") or pod_sc.get("seccompProfile") or {}).get("type")
        if seccomp not in ("RuntimeDefault", "Localhost"):
            problems.append(f"{name}: seccompProfile is {seccomp}")
        for port in c.get("ports") or []:
            if port.get("hostPort"):
                problems.append(f"{name}: hostPort")
    return problems


def test_restricted_checker_catches_a_bad_pod() -> None:
    bad = {
        "hostNetwork": True,
        "volumes": [{"name": "h", "hostPath": {"path": "/"}}],
        "containers": [{"name": "c", "securityContext": {"privileged": True, "runAsUser": 0}}],
    }
    problems = restricted_violations(bad)
    assert len(problems) >= 6, problems


@pytest.mark.parametrize(
    ("path", "kind", "name"),
    [
        (".", "Deployment", "redis-placer-binder"),
        (".", "CronJob", "redis-placer-rebalance"),
        ("examples/bind", "StatefulSet", "redis-shard-0"),
        ("examples/gate", "StatefulSet", "redis-shard-2"),
    ],
)
def test_workloads_are_restricted_compliant(path: str, kind: str, name: str) -> None:
    spec = pod_template(one(render(path), kind, name))["spec"]
    assert restricted_violations(spec) == []
    for c in spec["containers"]:
        assert c["securityContext"]["readOnlyRootFilesystem"] is True
        assert "limits" in c["resources"] and "requests" in c["resources"]


@pytest.mark.parametrize(
    ("kind", "name"), [("Deployment", "redis-placer-binder"), ("CronJob", "redis-placer-rebalance")]
)
def test_placer_runs_as_the_image_user(kind: str, name: str) -> None:
    spec = pod_template(one(main(), kind, name))["spec"]
    assert spec["securityContext"]["runAsUser"] == 10001
    assert spec["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    (container,) = spec["containers"]
    assert container["image"] == IMAGE
    sc = container["securityContext"]
    assert sc["runAsNonRoot"] is True and sc["runAsUser"] == 10001
    assert sc["capabilities"] == {"drop": ["ALL"]}
    mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
    volumes = {v["name"]: v for v in spec["volumes"]}
    policy_volume = volumes[mounts["/etc/redis-placer"]]
    assert policy_volume["configMap"]["name"] == one(main(), "ConfigMap")["metadata"]["name"]
    assert "emptyDir" in volumes[mounts["/tmp"]]  # writable scratch with a read-only root


def test_namespaces_enforce_restricted() -> None:
    for path in (".", "examples/bind"):
        labels = one(render(path), "Namespace")["metadata"]["labels"]
        assert labels["pod-security.kubernetes.io/enforce"] == "restricted"


# -- the binder ------------------------------------------------------------------------------


def test_binder_deployment() -> None:
    deployment = one(main(), "Deployment", "redis-placer-binder")
    assert deployment["spec"]["replicas"] == 2
    template = pod_template(deployment)
    selector = deployment["spec"]["selector"]["matchLabels"]
    assert selector.items() <= template["metadata"]["labels"].items()
    spec = template["spec"]
    assert spec["serviceAccountName"] == COMPONENT_ACCOUNTS["binder"]
    (c,) = spec["containers"]
    assert c["command"] + c["args"] == [
        "redis-placer", "binder", "--enforce", "bind", "--leader-elect",
        "-p", POLICY_PATH, "--metrics-port", "9090",
    ]  # fmt: skip
    assert c["ports"] == [{"name": "http-metrics", "containerPort": 9090, "protocol": "TCP"}]
    assert c["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "http-metrics"}
    assert c["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "http-metrics"}
    env = {e["name"]: e["valueFrom"]["fieldRef"]["fieldPath"] for e in c["env"]}
    assert env == {"POD_NAME": "metadata.name", "POD_NAMESPACE": "metadata.namespace"}

    service = one(main(), "Service", "redis-placer-metrics")
    assert service["spec"]["ports"] == [
        {"name": "http-metrics", "port": 9090, "targetPort": "http-metrics", "protocol": "TCP"}
    ]
    assert service["spec"]["selector"].items() <= template["metadata"]["labels"].items()
    pdb = one(main(), "PodDisruptionBudget", "redis-placer-binder")
    assert pdb["spec"]["selector"]["matchLabels"] == selector
    assert pdb["spec"]["minAvailable"] < deployment["spec"]["replicas"]


def test_policy_configmap_holds_the_default_policy() -> None:
    data = one(main(), "ConfigMap", "redis-placer-policy")["data"]
    assert list(data) == ["policy.yaml"]
    policy = Policy.model_validate(yaml.safe_load(data["policy.yaml"]))
    assert policy == Policy()


# -- rebalance -------------------------------------------------------------------------------


def test_rebalance_cronjob() -> None:
    cronjob = one(main(), "CronJob", "redis-placer-rebalance")
    assert cronjob["spec"]["schedule"] == "*/5 * * * *"
    assert cronjob["spec"]["concurrencyPolicy"] == "Forbid"
    deadline = cronjob["spec"]["jobTemplate"]["spec"]["activeDeadlineSeconds"]
    assert deadline < 5 * 60  # a run ends before the next is due
    spec = pod_template(cronjob)["spec"]
    assert spec["serviceAccountName"] == COMPONENT_ACCOUNTS["rebalance"]
    assert spec["restartPolicy"] == "Never"
    (c,) = spec["containers"]
    # The guarantee kept by default: failovers applied (no data moves), moves off.
    assert c["command"] + c["args"] == [
        "redis-placer",
        "rebalance",
        "-p",
        POLICY_PATH,
        "--apply",
        "--max-moves",
        "0",
    ]
    text = (DEPLOY / "base" / "rebalance" / "cronjob.yaml").read_text()
    assert 'drop "--apply"' in text and 'raise "--max-moves"' in text  # the way back, beside it


def test_rebalance_is_included_from_the_main_kustomization() -> None:
    kustomization = yaml.safe_load((DEPLOY / "kustomization.yaml").read_text())
    assert kustomization["resources"] == ["base"]
    base = yaml.safe_load((DEPLOY / "base" / "kustomization.yaml").read_text())
    assert "rebalance" in base["resources"]


# -- RBAC against the adapter's table --------------------------------------------------------


def granted(docs: tuple[Doc, ...], account: str) -> dict[str, set[Permission]]:
    """What ``account`` may do, cluster-wide and in its own namespace, per the rendered RBAC."""
    roles = {(d["kind"], d["metadata"].get("namespace"), d["metadata"]["name"]): d for d in docs}
    scopes: dict[str, set[Permission]] = {"cluster": set(), "namespace": set()}
    for binding in docs:
        if binding["kind"] not in ("ClusterRoleBinding", "RoleBinding"):
            continue
        subjects = binding.get("subjects") or []
        if not any(
            s["kind"] == "ServiceAccount" and s["name"] == account and s["namespace"] == NAMESPACE
            for s in subjects
        ):
            continue
        ref = binding["roleRef"]
        namespace = binding["metadata"].get("namespace") if ref["kind"] == "Role" else None
        role = roles[(ref["kind"], namespace, ref["name"])]
        if binding["kind"] == "RoleBinding":
            assert binding["metadata"]["namespace"] == NAMESPACE
        scope = "cluster" if binding["kind"] == "ClusterRoleBinding" else "namespace"
        for rule in role["rules"]:
            assert "resourceNames" not in rule or scope == "namespace"
            for group in rule["apiGroups"]:
                for resource in rule["resources"]:
                    for verb in rule["verbs"]:
                        assert "*" not in (group, resource, verb), "no wildcards in RBAC"
                        scopes[scope].add(Permission(group, resource, verb))
    return scopes


@pytest.mark.parametrize("component", sorted(COMPONENT_CALLS))
def test_rbac_grants_exactly_what_the_adapter_uses(component: str) -> None:
    have = granted(main(), COMPONENT_ACCOUNTS[component])
    need = permissions_for(component)
    assert need["cluster"] - have["cluster"] == set(), "missing cluster-wide grants"
    assert need["namespace"] - (have["namespace"] | have["cluster"]) == set(), "missing grants"
    assert have["cluster"] - need["cluster"] == set(), "cluster-wide grants nobody uses"
    assert have["namespace"] - need["namespace"] == set(), "namespace grants nobody uses"


def test_binder_cannot_evict_and_rebalance_cannot_bind() -> None:
    binder = granted(main(), COMPONENT_ACCOUNTS["binder"])["cluster"]
    rebalance = granted(main(), COMPONENT_ACCOUNTS["rebalance"])["cluster"]
    assert Permission("", "pods/eviction", "create") not in binder
    assert Permission("", "pods/binding", "create") not in rebalance
    for perms in (binder, rebalance):
        assert not {p for p in perms if p.verb in ("delete", "deletecollection", "update")}


# -- examples --------------------------------------------------------------------------------


@pytest.mark.parametrize("variant", ["bind", "gate"])
def test_example_redis_cluster(variant: str) -> None:
    docs = render(f"examples/{variant}")
    policy = Policy()
    sets = sorted(
        (d for d in docs if d["kind"] == "StatefulSet"), key=lambda d: d["metadata"]["name"]
    )
    assert [s["metadata"]["name"] for s in sets] == [
        "redis-shard-0",
        "redis-shard-1",
        "redis-shard-2",
    ]
    for n, sts in enumerate(sets):
        spec = sts["spec"]
        assert spec["replicas"] == 2 and spec["podManagementPolicy"] == "Parallel"
        template = spec["template"]
        labels = template["metadata"]["labels"]
        assert labels == {"app": "redis", "redis-cluster": "redis", "redis-shard": str(n)}
        assert spec["selector"]["matchLabels"].items() <= labels.items()
        assert policy.selector.items() <= labels.items()  # the binder manages these pods
        assert {policy.labels.cluster, policy.labels.shard} <= set(labels)
        assert template["metadata"]["annotations"]["redis-placer.io/shard-size"] == "2"
        pod = template["spec"]
        if variant == "bind":
            assert pod["schedulerName"] == policy.scheduler_name
            assert "schedulingGates" not in pod
        else:
            assert "schedulerName" not in pod
            assert pod["schedulingGates"] == [{"name": GATE}]
    pdbs = [d for d in docs if d["kind"] == "PodDisruptionBudget"]
    assert sorted(p["spec"]["selector"]["matchLabels"]["redis-shard"] for p in pdbs) == [
        "0",
        "1",
        "2",
    ]


# -- optional components ---------------------------------------------------------------------


@pytest.mark.parametrize(("component", "flag"), sorted(FLAG_CALLS))
def test_a_flags_component_adds_it_and_exactly_its_grants(component: str, flag: str) -> None:
    docs = with_component(flag.removeprefix("--"))
    account = COMPONENT_ACCOUNTS[component]
    have = granted(docs, account)
    need = permissions_for(component, (flag,))
    assert have["cluster"] == need["cluster"]
    assert have["namespace"] - need["namespace"] == set()
    # Without the component none of the flag's grants is there.
    extra = permissions_for(component, (flag,))["cluster"] - permissions_for(component)["cluster"]
    assert extra and not extra & granted(main(), account)["cluster"]
    (c,) = pod_template(one(docs, "Deployment", "redis-placer-binder"))["spec"]["containers"]
    assert (
        c["args"][-1] == flag
        and flag not in pod_template(one(main(), "Deployment"))["spec"]["containers"][0]["args"]
    )
    for doc in docs:
        try:
            kubernetes_validate.validate(doc, _schema_versions()[-1], strict=True)
        except kubernetes_validate.ValidationError as err:
            pytest.fail(f"{doc['kind']}/{doc['metadata']['name']}: {err.message}")
