"""deploy/ renders, validates against Kubernetes' schemas, is Pod-Security "restricted", and
grants exactly the API calls the adapter makes (placer.kube.adapter.REQUIRED_PERMISSIONS)."""

import functools
import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass, field
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


def kustomize(folder: Path) -> tuple[Doc, ...]:
    """What `kubectl kustomize` renders of ``folder``."""
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        pytest.skip("kubectl is not on PATH: cannot run `kubectl kustomize`")
    out = subprocess.run(
        [kubectl, "kustomize", str(folder)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert out.returncode == 0, out.stderr
    return tuple(d for d in yaml.safe_load_all(out.stdout) if d)


@functools.cache
def render(path: str) -> tuple[Doc, ...]:
    """deploy/<path> rendered (once a run)."""
    return kustomize(DEPLOY / path)


def main() -> tuple[Doc, ...]:
    return render(".")


@functools.cache
def overlay(base: str, *components: str) -> tuple[Doc, ...]:
    """deploy/<base> with components of deploy/components/ on top, as a user's overlay."""
    with tempfile.TemporaryDirectory(prefix="overlay-") as folder:
        where = Path(folder)
        (where / "kustomization.yaml").write_text(
            yaml.safe_dump(
                {
                    "apiVersion": "kustomize.config.k8s.io/v1beta1",
                    "kind": "Kustomization",
                    "resources": [os.path.relpath(DEPLOY / base, where)],
                    "components": [
                        os.path.relpath(DEPLOY / "components" / c, where) for c in components
                    ],
                }
            )
        )
        return kustomize(where)


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
            ("ClusterRole", "redis-placer-binder-redis"),
            ("ClusterRole", "redis-placer-rebalance"),
            ("ClusterRole", "redis-placer-rebalance-redis"),
            ("ClusterRoleBinding", "redis-placer-binder"),
            ("ClusterRoleBinding", "redis-placer-rebalance"),
            ("Role", "redis-placer-binder-leader"),
            ("Role", "redis-placer-rebalance-report"),
            ("RoleBinding", "redis-placer-binder"),
            ("RoleBinding", "redis-placer-binder-leader"),
            ("RoleBinding", "redis-placer-rebalance"),
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
            # only the RoleBindings that let the workloads write pods where Redis runs are elsewhere
            elsewhere = doc["kind"] == "RoleBinding" and doc["roleRef"]["name"].endswith("-redis")
            assert (doc["metadata"]["namespace"] != NAMESPACE) is elsewhere, doc["metadata"]["name"]


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

COMPONENTS = DEPLOY / "components"
OPT_IN_ALL = "all-namespaces"
POD_READS = {"get", "list", "watch"}


def _configurations() -> dict[str, tuple[str, tuple[str, ...]]]:
    """Every way deploy/ is meant to be rendered, by a readable id: the install, each profile,
    the install with each of deploy/components/ (bind-mode after gate-mode, as it requires;
    redis-namespaces and all-namespaces on deploy/base, which has neither), and a profile with
    the cluster-wide opt-in."""
    found: dict[str, tuple[str, tuple[str, ...]]] = {".": (".", ())}
    for path in sorted((DEPLOY / "profiles").iterdir()):
        found[f"profiles/{path.name}"] = (f"profiles/{path.name}", ())
    for path in sorted(p for p in COMPONENTS.iterdir() if p.is_dir()):
        if path.name == "bind-mode":
            found[path.name] = (".", ("gate-mode", "bind-mode"))
        elif path.name in ("redis-namespaces", OPT_IN_ALL):
            found[path.name] = ("base", (path.name,))
        else:
            found[path.name] = (".", (path.name,))
    found[f"profiles/bitnami+{OPT_IN_ALL}"] = ("profiles/bitnami", (OPT_IN_ALL,))
    return found


CONFIGURATIONS = _configurations()


def rendered(config: str) -> tuple[Doc, ...]:
    base, components = CONFIGURATIONS[config]
    return overlay(base, *components) if components else render(base)


def binder_args(docs: tuple[Doc, ...]) -> list[str]:
    (container,) = pod_template(one(docs, "Deployment", "redis-placer-binder"))["spec"][
        "containers"
    ]
    return list(container["command"]) + list(container["args"])


@dataclass
class Grants:
    """What one ServiceAccount may do, per the rendered RBAC: everywhere, in redis-placer's own
    namespace, and in each other namespace (those that hold Redis)."""

    cluster: set[Permission] = field(default_factory=set)
    own: set[Permission] = field(default_factory=set)
    redis: dict[str, set[Permission]] = field(default_factory=dict)
    named: dict[Permission, set[str]] = field(default_factory=dict)
    """The grants held to objects of some names only (resourceNames), with those names."""
    unnamed: set[Permission] = field(default_factory=set)
    """The grants of any object, wherever they hold."""


# The cluster-scoped objects a ClusterRole may name (resourceNames): the install's own.
NAMED_CLUSTER_RESOURCES = {"validatingwebhookconfigurations"}


def granted(docs: tuple[Doc, ...], account: str) -> Grants:
    roles = {(d["kind"], d["metadata"].get("namespace"), d["metadata"]["name"]): d for d in docs}
    grants = Grants()
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
        where = binding["metadata"].get("namespace")
        role = roles[(ref["kind"], where if ref["kind"] == "Role" else None, ref["name"])]
        if binding["kind"] == "ClusterRoleBinding":
            into = grants.cluster
        elif where == NAMESPACE:
            into = grants.own
        else:
            into = grants.redis.setdefault(where, set())
        for rule in role["rules"]:
            names = rule.get("resourceNames")
            assert (
                names is None
                or into is not grants.cluster
                or set(rule["resources"]) <= NAMED_CLUSTER_RESOURCES
            ), rule
            for group in rule["apiGroups"]:
                for resource in rule["resources"]:
                    for verb in rule["verbs"]:
                        assert "*" not in (group, resource, verb), "no wildcards in RBAC"
                        permission = Permission(group, resource, verb)
                        into.add(permission)
                        if names:
                            grants.named.setdefault(permission, set()).update(names)
                        else:
                            grants.unnamed.add(permission)
    return grants


def gated_namespaces(docs: tuple[Doc, ...]) -> set[str] | None:
    """The namespaces a MutatingAdmissionPolicyBinding gates pods in; None for all of them."""
    binding = one(docs, "MutatingAdmissionPolicyBinding")
    selector = binding["spec"]["matchResources"]["namespaceSelector"]
    if selector == {}:
        return None
    (expression,) = selector["matchExpressions"]
    assert expression["key"] == "kubernetes.io/metadata.name"
    assert expression["operator"] == "In" and set(selector) == {"matchExpressions"}
    return set(expression["values"])


def test_every_component_and_profile_is_rendered() -> None:
    used = {c for _, components in CONFIGURATIONS.values() for c in components}
    assert used == {p.name for p in COMPONENTS.iterdir() if p.is_dir()}
    profiles = {base for base, _ in CONFIGURATIONS.values() if base.startswith("profiles/")}
    assert profiles == {f"profiles/{p.name}" for p in (DEPLOY / "profiles").iterdir()}


@pytest.mark.parametrize("config", sorted(CONFIGURATIONS))
@pytest.mark.parametrize("component", sorted(COMPONENT_CALLS))
def test_no_grant_is_wider_or_narrower_than_the_code_calls(component: str, config: str) -> None:
    """For each workload of each rendering: cluster-wide, in its own namespace and in every
    Redis namespace, the grants are exactly what its calls (and its flags' calls) need."""
    docs = rendered(config)
    args = binder_args(docs) if component == "binder" else []
    flags = tuple(a for a in args if (component, a) in FLAG_CALLS)
    need = permissions_for(component, flags)
    have = granted(docs, COMPONENT_ACCOUNTS[component])
    assert have.own == need["namespace"]
    if OPT_IN_ALL in CONFIGURATIONS[config][1]:
        assert have.cluster == need["cluster"] | need["redis"]
        return
    assert have.cluster == need["cluster"], (
        f"missing {need['cluster'] - have.cluster}, not needed {have.cluster - need['cluster']}"
    )
    assert have.redis, "no namespace that holds Redis is listed"
    for namespace, permissions in have.redis.items():
        assert permissions == need["redis"], namespace


@pytest.mark.parametrize("config", sorted(c for c in CONFIGURATIONS if c.startswith("profiles/")))
def test_pods_are_gated_only_where_the_binder_may_lift_the_gate(config: str) -> None:
    """A profile's admission policy (the other renderings have none) gates pods only in the
    namespaces where the binder may lift the gate."""
    docs = rendered(config)
    gated = gated_namespaces(docs)
    if OPT_IN_ALL in CONFIGURATIONS[config][1]:
        assert gated is None
    else:
        assert gated == set(granted(docs, COMPONENT_ACCOUNTS["binder"]).redis)


@pytest.mark.parametrize("component", sorted(COMPONENT_CALLS))
def test_no_workload_writes_pods_cluster_wide(component: str) -> None:
    """The table itself: outside the Redis namespaces a workload only reads pods; it never
    binds (the binder binds Redis pods alone), patches, deletes or evicts one."""
    flags = tuple(f for c, f in FLAG_CALLS if c == component)
    cluster = permissions_for(component, flags)["cluster"]
    writes = {
        p
        for p in cluster
        if p.group == "" and p.resource.split("/")[0] == "pods" and p.verb not in POD_READS
    }
    assert writes == set()
    binder = permissions_for("binder")
    assert Permission("", "pods/binding", "create") in binder["redis"]
    assert Permission("", "pods/binding", "create") not in binder["cluster"]


def test_binder_binds_only_in_the_redis_namespaces() -> None:
    """As rendered: the binder's Binding grant is bound by a RoleBinding in each Redis namespace
    only; with deploy/components/all-namespaces (the opt-in) everywhere."""
    binding = Permission("", "pods/binding", "create")
    shipped = granted(main(), COMPONENT_ACCOUNTS["binder"])
    assert binding not in shipped.cluster
    assert shipped.redis and all(binding in scope for scope in shipped.redis.values())
    everywhere = granted(rendered(OPT_IN_ALL), COMPONENT_ACCOUNTS["binder"])
    assert binding in everywhere.cluster


def test_binder_cannot_evict_and_rebalance_cannot_bind() -> None:
    binder = granted(main(), COMPONENT_ACCOUNTS["binder"])
    rebalance = granted(main(), COMPONENT_ACCOUNTS["rebalance"])
    for scope in (binder.cluster, *binder.redis.values()):
        assert Permission("", "pods/eviction", "create") not in scope
    for scope in (rebalance.cluster, *rebalance.redis.values()):
        assert Permission("", "pods/binding", "create") not in scope
    for grants in (binder, rebalance):
        for scope in (grants.cluster, *grants.redis.values()):
            assert not {p for p in scope if p.verb in ("delete", "deletecollection", "update")}


def test_the_shipped_redis_namespace_is_the_examples() -> None:
    """deploy/ with deploy/examples/* works as shipped: the example Redis is where it may write."""
    example = one(render("examples/bind"), "Namespace")["metadata"]["name"]
    for component in COMPONENT_CALLS:
        assert set(granted(main(), COMPONENT_ACCOUNTS[component]).redis) == {example}


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
    docs = overlay(".", flag.removeprefix("--"))
    account = COMPONENT_ACCOUNTS[component]
    have = granted(docs, account)
    need = permissions_for(component, (flag,))
    assert have.cluster == need["cluster"]
    assert have.own == need["namespace"]
    assert all(permissions == need["redis"] for permissions in have.redis.values())
    # Without the component none of the flag's grants is there.
    plain = permissions_for(component)
    extra = (need["cluster"] - plain["cluster"]) | (need["redis"] - plain["redis"])
    without = granted(main(), account)
    assert extra and not extra & (without.cluster | set().union(*without.redis.values()))
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


# -- the maintenance guard -------------------------------------------------------------------

GUARD = "redis-placer-guard"
GUARD_SERVICE = "redis-placer-webhook"
GUARD_SECRET = "redis-placer-webhook-tls"
WEBHOOK_GROUP = "admissionregistration.k8s.io"
GUARD_RULES = {
    "evictions.guard.redis-placer.io": ("CREATE", "pods/eviction"),
    "deletes.guard.redis-placer.io": ("DELETE", "pods"),
}


def with_guard() -> list[str]:
    return sorted(c for c in CONFIGURATIONS if "--guard" in binder_args(rendered(c)))


def test_the_guard_is_rendered_alone_and_in_every_profile() -> None:
    assert "guard" in with_guard()
    assert {c for c in with_guard() if c.startswith("profiles/")} == {
        c for c in CONFIGURATIONS if c.startswith("profiles/")
    }
    assert "--guard" not in binder_args(main())  # deploy/ as shipped has no guard


@pytest.mark.parametrize("config", with_guard())
def test_the_guards_webhooks_fail_open_and_reach_the_binder(config: str) -> None:
    docs = rendered(config)
    configuration = one(docs, "ValidatingWebhookConfiguration", GUARD)
    assert "namespace" not in configuration["metadata"], "cluster-scoped"
    webhooks = {w["name"]: w for w in configuration["webhooks"]}
    assert set(webhooks) == set(GUARD_RULES)
    for name, (operation, resource) in GUARD_RULES.items():
        webhook = webhooks[name]
        assert webhook["rules"] == [
            {
                "apiGroups": [""],
                "apiVersions": ["v1"],
                "operations": [operation],
                "resources": [resource],
                "scope": "Namespaced",
            }
        ]
        assert webhook["failurePolicy"] == "Ignore"  # a guard that is down never blocks
        assert webhook["timeoutSeconds"] == 5
        assert webhook["sideEffects"] == "NoneOnDryRun"
        assert webhook["admissionReviewVersions"] == ["v1"]
        assert webhook["matchPolicy"] == "Equivalent"
        assert webhook["clientConfig"] == {
            "service": {
                "namespace": NAMESPACE,
                "name": GUARD_SERVICE,
                "path": "/validate",
                "port": 443,
            }
        }  # no caBundle: the binder sets it, and a re-apply leaves it
    service = one(docs, "Service", GUARD_SERVICE)
    assert service["metadata"]["namespace"] == NAMESPACE
    assert service["spec"]["ports"] == [
        {"name": "webhook", "port": 443, "targetPort": "webhook", "protocol": "TCP"}
    ]
    template = pod_template(one(docs, "Deployment", "redis-placer-binder"))
    assert service["spec"]["selector"].items() <= template["metadata"]["labels"].items()
    (container,) = template["spec"]["containers"]
    assert {"name": "webhook", "containerPort": 9443, "protocol": "TCP"} in container["ports"]


@pytest.mark.parametrize("config", with_guard())
def test_the_guard_is_called_only_where_the_binder_may_write_pods(config: str) -> None:
    """Its webhooks' namespaceSelector names the namespaces of the binder's Redis grants (the
    list of deploy/components/redis-namespaces), or is empty with the cluster-wide opt-in; in a
    profile it is the admission policy's, copied."""
    docs = rendered(config)
    selectors = [
        w["namespaceSelector"]
        for w in one(docs, "ValidatingWebhookConfiguration", GUARD)["webhooks"]
    ]
    if OPT_IN_ALL in CONFIGURATIONS[config][1]:
        assert selectors == [{}, {}]
        return
    namespaces = set(granted(docs, COMPONENT_ACCOUNTS["binder"]).redis)
    for selector in selectors:
        (expression,) = selector["matchExpressions"]
        assert expression["key"] == "kubernetes.io/metadata.name"
        assert expression["operator"] == "In" and set(expression["values"]) == namespaces
    if config.startswith("profiles/"):
        binding = one(docs, "MutatingAdmissionPolicyBinding")
        assert selectors == [binding["spec"]["matchResources"]["namespaceSelector"]] * 2


def test_a_profile_guards_the_namespaces_its_one_list_names(tmp_path: Path) -> None:
    """Edit the namespaces of deploy/components/redis-namespaces, as docs/install.md says, and a
    profile's guard follows: no second list for it."""
    copy = tmp_path / "deploy"
    shutil.copytree(DEPLOY, copy)
    component = copy / "components" / "redis-namespaces"
    kustomization = component / "kustomization.yaml"
    assert kustomization.read_text().count("values: [redis]") == 1
    kustomization.write_text(
        kustomization.read_text().replace("values: [redis]", "values: [orders, payments]")
    )
    bindings = (component / "rolebindings.yaml").read_text()
    (component / "rolebindings.yaml").write_text(
        "\n---\n".join(
            bindings.replace("namespace: redis\n", f"namespace: {n}\n")
            for n in ("orders", "payments")
        )
    )
    docs = render(str(copy / "profiles" / "bitnami"))
    for webhook in one(docs, "ValidatingWebhookConfiguration", GUARD)["webhooks"]:
        (expression,) = webhook["namespaceSelector"]["matchExpressions"]
        assert expression["values"] == ["orders", "payments"]
    assert set(granted(docs, COMPONENT_ACCOUNTS["binder"]).redis) == {"orders", "payments"}


@pytest.mark.parametrize("config", with_guard())
def test_the_guards_own_objects_are_granted_by_name(config: str) -> None:
    """The webhook configuration and the serving Secret are named in their rules; creating the
    Secret cannot be (RBAC checks a create before the object has its name), so that grant holds
    in the binder's own namespace only."""
    have = granted(rendered(config), COMPONENT_ACCOUNTS["binder"])
    for verb in ("get", "patch"):
        permission = Permission(WEBHOOK_GROUP, "validatingwebhookconfigurations", verb)
        assert have.named[permission] == {GUARD} and permission not in have.unnamed
    for verb in ("get", "update"):
        permission = Permission("", "secrets", verb)
        assert have.named[permission] == {GUARD_SECRET}
    assert Permission("", "secrets", "update") not in have.unnamed
    create = Permission("", "secrets", "create")
    assert create in have.own and create not in have.cluster
    assert not any(create in permissions for permissions in have.redis.values())
    # secrets get without a name: only in the Redis namespaces (the Redis password), unless
    # the cluster-wide opt-in makes every namespace one
    if OPT_IN_ALL not in CONFIGURATIONS[config][1]:
        assert Permission("", "secrets", "get") not in have.cluster
