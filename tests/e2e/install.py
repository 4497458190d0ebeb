"""redis-placer installed on the e2e control plane as a user installs it, and run as deployed.

``render`` is ``kubectl kustomize deploy/profiles/NAME``; ``for_namespace`` lists the test's
namespace where the profile lists the namespaces that hold Redis (as a user edits
deploy/components/redis-namespaces); ``install`` creates every object but the workloads; the
binder and the CronJob's job then run as processes with the rendered command, arguments and
environment, authenticated as their own ServiceAccounts (a TokenRequest token), so their RBAC is
the real authorizer's to judge.
"""

from __future__ import annotations

import contextlib
import copy
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes.client import ApiClient, CoreV1Api

from tests.e2e.control_plane import ControlPlane, json_of

ROOT = Path(__file__).resolve().parents[2]
POLICY_MOUNT = "/etc/redis-placer"
REDIS_NAMESPACE_AS_SHIPPED = "redis"
_PATHS = {
    "Namespace": "/api/v1/namespaces",
    "ServiceAccount": "/api/v1/namespaces/{ns}/serviceaccounts",
    "ConfigMap": "/api/v1/namespaces/{ns}/configmaps",
    "Service": "/api/v1/namespaces/{ns}/services",
    "Role": "/apis/rbac.authorization.k8s.io/v1/namespaces/{ns}/roles",
    "RoleBinding": "/apis/rbac.authorization.k8s.io/v1/namespaces/{ns}/rolebindings",
    "ClusterRole": "/apis/rbac.authorization.k8s.io/v1/clusterroles",
    "ClusterRoleBinding": "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings",
    "PodDisruptionBudget": "/apis/policy/v1/namespaces/{ns}/poddisruptionbudgets",
    "MutatingAdmissionPolicy": "/apis/admissionregistration.k8s.io/v1/mutatingadmissionpolicies",
    "MutatingAdmissionPolicyBinding": (
        "/apis/admissionregistration.k8s.io/v1/mutatingadmissionpolicybindings"
    ),
}
WORKLOADS = ("Deployment", "CronJob")


def render(folder: Path) -> list[dict[str, Any]]:
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        pytest.skip("kubectl is not installed: deploy/ cannot be rendered")
    out = subprocess.run(
        [kubectl, "kustomize", str(folder)], check=True, capture_output=True, text=True, timeout=120
    ).stdout
    return [doc for doc in yaml.safe_load_all(out) if doc]


def placer_namespace(namespace: str) -> str:
    """Where one test's install lives (its own ServiceAccounts, Lease, policy)."""
    return f"{namespace}-placer"


def for_namespace(objects: list[dict[str, Any]], namespace: str) -> list[dict[str, Any]]:
    """The objects as a user renders them after listing ``namespace`` as the one holding Redis
    (the shipped list holds ``redis``). So that the installs of several tests live side by
    side, redis-placer's own namespace is ``placer_namespace(namespace)`` and cluster-scoped
    objects carry the namespace in their name."""
    text = json.dumps(objects)
    text = text.replace(
        f'"namespace": "{REDIS_NAMESPACE_AS_SHIPPED}"', f'"namespace": "{namespace}"'
    )
    text = text.replace(f'"values": ["{REDIS_NAMESPACE_AS_SHIPPED}"]', f'"values": ["{namespace}"]')
    own = placer_namespace(namespace)
    text = text.replace('"namespace": "redis-placer"', f'"namespace": "{own}"')
    out: list[dict[str, Any]] = json.loads(text)
    for obj in out:
        if obj["kind"] == "Namespace" and obj["metadata"]["name"] == "redis-placer":
            obj["metadata"]["name"] = own
    renamed = {o["metadata"]["name"] for o in out if o["kind"].startswith(("Cluster", "Mutating"))}
    for obj in out:
        if obj["kind"] == "MutatingAdmissionPolicyBinding":
            # Whatever list the profile ships, this install gates this namespace's pods only.
            obj["spec"].setdefault("matchResources", {})["namespaceSelector"] = {
                "matchLabels": {"kubernetes.io/metadata.name": namespace}
            }
        if obj["metadata"]["name"] in renamed and obj["kind"].startswith(("Cluster", "Mutating")):
            obj["metadata"]["name"] += f"-{namespace}"
        ref = obj.get("roleRef") or {}
        if ref.get("kind") == "ClusterRole" and ref.get("name") in renamed:
            ref["name"] += f"-{namespace}"
        spec = obj.get("spec") or {}
        if obj["kind"] == "MutatingAdmissionPolicyBinding" and spec.get("policyName") in renamed:
            spec["policyName"] += f"-{namespace}"
    return out


def api_call(api: ApiClient, method: str, path: str, body: Any = None) -> tuple[int, Any]:
    serialized = api.param_serialize(
        method,
        path,
        header_params={"Content-Type": "application/json", "Accept": "application/json"},
        body=body,
        auth_settings=["BearerToken"],
    )
    response = api.call_api(*serialized[:4])
    response.read()
    return response.status, json.loads(response.data or b"{}")


def install(api: ApiClient, objects: list[dict[str, Any]]) -> None:
    """Every object but the workloads (they run as processes here), created or replaced."""
    order = list(_PATHS)
    for obj in sorted(
        (o for o in objects if o["kind"] not in WORKLOADS),
        key=lambda o: order.index(o["kind"]) if o["kind"] in order else len(order),
    ):
        if obj["kind"] not in _PATHS:
            raise AssertionError(f"install: no path known for kind {obj['kind']}")
        path = _PATHS[obj["kind"]].format(ns=obj["metadata"].get("namespace", ""))
        status, body = api_call(api, "POST", path, obj)
        if status == 409 and obj["kind"] != "Namespace":
            named = f"{path}/{obj['metadata']['name']}"
            _, current = api_call(api, "GET", named)
            obj = copy.deepcopy(obj)
            obj["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"]
            status, body = api_call(api, "PUT", named, obj)
        if status >= 300 and status != 409:
            raise AssertionError(f"install {obj['kind']} {obj['metadata']['name']}: {body}")


def uninstall(api: ApiClient, objects: list[dict[str, Any]]) -> None:
    """The admission policy first (pods are no longer gated), then everything else."""
    first = [o for o in objects if o["kind"].startswith("MutatingAdmissionPolicy")]
    rest = [o for o in objects if o not in first and o["kind"] in _PATHS]
    for obj in [*first, *rest]:
        path = _PATHS[obj["kind"]].format(ns=obj["metadata"].get("namespace", ""))
        status, body = api_call(api, "DELETE", f"{path}/{obj['metadata']['name']}")
        if status >= 300 and status != 404:
            raise AssertionError(f"uninstall {obj['kind']} {obj['metadata']['name']}: {body}")


def container(objects: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    """The one container of the rendered Deployment (the binder) or CronJob."""
    (obj,) = [o for o in objects if o["kind"] == kind]
    spec = (
        obj["spec"]["template"]["spec"]
        if kind == "Deployment"
        else obj["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    )
    (found,) = spec["containers"]
    result: dict[str, Any] = found
    return result


def policy_text(objects: list[dict[str, Any]]) -> str:
    (config,) = [
        o
        for o in objects
        if o["kind"] == "ConfigMap" and o["metadata"]["name"] == "redis-placer-policy"
    ]
    text: str = config["data"]["policy.yaml"]
    return text


def service_account_kubeconfig(
    plane: ControlPlane, api: ApiClient, namespace: str, account: str, path: Path
) -> Path:
    """A kubeconfig holding a fresh token of ``account`` (a TokenRequest, as a projected
    service-account token is)."""
    token = json_of(
        CoreV1Api(api).create_namespaced_service_account_token(
            account,
            namespace,
            {"spec": {"expirationSeconds": 3600}},  # type: ignore[arg-type]
            _preload_content=False,
        )
    )["status"]["token"]
    assert plane.pki is not None
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": "e2e",
                "cluster": {"server": plane.url, "certificate-authority": str(plane.pki.ca_cert)},
            }
        ],
        "users": [{"name": account, "user": {"token": token}}],
        "contexts": [{"name": "e2e", "context": {"cluster": "e2e", "user": account}}],
        "current-context": "e2e",
    }
    path.write_text(json.dumps(config))
    path.chmod(0o600)
    return path


@dataclass
class Workload:
    """A rendered container, run here: its command and arguments, its environment (field
    references as the kubelet would fill them), its policy file and its ServiceAccount."""

    command: list[str]
    env: dict[str, str]
    kubeconfig: Path

    def run(self, timeout: float = 300.0) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            self.command,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )

    @contextlib.contextmanager
    def running(self, log: Path) -> Iterator[subprocess.Popen[bytes]]:
        with log.open("wb") as out:
            proc = subprocess.Popen(
                self.command, env=self.env, stdout=out, stderr=subprocess.STDOUT
            )
            try:
                yield proc
            finally:
                proc.terminate()
                try:
                    proc.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait(timeout=10)


def workload(
    spec: Mapping[str, Any], policy_file: Path, kubeconfig: Path, pod_name: str, namespace: str
) -> Workload:
    console = Path(sys.executable).with_name("redis-placer")
    command = [str(console), *spec.get("command", [])[1:], *spec.get("args", [])]
    command = [a.replace(f"{POLICY_MOUNT}/policy.yaml", str(policy_file)) for a in command]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KUBE", "REDIS"))}
    env["KUBECONFIG"] = str(kubeconfig)
    fields = {"metadata.name": pod_name, "metadata.namespace": namespace}
    for entry in spec.get("env") or []:
        if "value" in entry:
            env[entry["name"]] = entry["value"]
        else:
            field = ((entry.get("valueFrom") or {}).get("fieldRef") or {}).get("fieldPath")
            if field not in fields:
                raise AssertionError(f"env {entry['name']}: cannot stand in for {entry}")
            env[entry["name"]] = fields[field]
    return Workload(command=command, env=env, kubeconfig=kubeconfig)


def wait_for_gating(api: ApiClient, namespace: str, labels: Mapping[str, str], gate: str) -> None:
    """A new admission policy takes effect once the API server loads it: dry-run creates
    probe it."""
    probe = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "gate-probe", "namespace": namespace, "labels": dict(labels)},
        "spec": {"containers": [{"name": "c", "image": "redis:7"}]},
    }
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        status, made = api_call(
            api, "POST", f"/api/v1/namespaces/{namespace}/pods?dryRun=All", probe
        )
        gates = [g["name"] for g in (made.get("spec") or {}).get("schedulingGates") or []]
        if status < 300 and gate in gates:
            return
        time.sleep(0.5)
    pytest.fail("the profile's MutatingAdmissionPolicy never gated a pod")
