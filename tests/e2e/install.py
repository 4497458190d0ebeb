"""deploy/ installed on a real control plane as a user installs it: rendered by kustomize and
applied (or deleted) with kubectl, the service accounts' tokens issued by the API server.

The binder and the CronJob's job can run as processes with the rendered command, arguments and
environment (``workload``), authenticated as their own ServiceAccounts, so their RBAC is the
real authorizer's to judge; ``for_namespace`` gives one test's install a namespace of its own.
"""

import contextlib
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes.client import ApiClient, CoreV1Api
from kubernetes.client.exceptions import ApiException

from tests.e2e.control_plane import (
    ControlPlane,
    create_namespace,
    create_node,
    create_pod,
    json_of,
)

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
NAMESPACE = "redis-placer"
SERVICE_ACCOUNT_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"

Doc = dict[str, Any]


def kubectl_binary() -> str:
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        pytest.skip("kubectl is not on PATH: cannot render or apply deploy/")
    return kubectl


def render(path: str) -> list[Doc]:
    out = subprocess.run(
        [kubectl_binary(), "kustomize", str(DEPLOY / path)],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    return [d for d in yaml.safe_load_all(out.stdout) if d]


def kubectl(
    plane: ControlPlane, *args: str, docs: Sequence[Doc] | None = None
) -> subprocess.CompletedProcess[str]:
    """kubectl as the cluster's admin; ``docs`` go to its stdin (``-f -``)."""
    return subprocess.run(
        [kubectl_binary(), f"--kubeconfig={plane.kubeconfig}", *args],
        input=yaml.safe_dump_all(docs) if docs is not None else None,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def install(plane: ControlPlane, docs: Sequence[Doc]) -> None:
    """`kubectl apply`, after the namespaces that hold Redis exist (its RoleBindings need them)."""
    api = plane.api_client()
    for namespace in sorted(
        {d["metadata"]["namespace"] for d in docs if d["kind"] == "RoleBinding"} - {NAMESPACE}
    ):
        try:
            create_namespace(api, namespace)
        except ApiException as exc:
            if exc.status != 409:  # a namespace that exists already is what was asked
                raise
    applied = kubectl(plane, "apply", "-f", "-", docs=docs)
    assert applied.returncode == 0, applied.stderr


def one(docs: Sequence[Doc], kind: str, name: str | None = None) -> Doc:
    (found,) = [d for d in docs if d["kind"] == kind and name in (None, d["metadata"]["name"])]
    return found


def container_of(docs: Sequence[Doc], kind: str) -> Doc:
    workload = one(docs, kind)
    spec = workload["spec"]
    template = spec["jobTemplate"]["spec"]["template"] if kind == "CronJob" else spec["template"]
    (container,) = template["spec"]["containers"]
    return dict(container)


def readable_dir(path: Path, files: Mapping[str, str]) -> Path:
    """A folder uid 10001 can read, as the kubelet mounts a ConfigMap or a token."""
    path.mkdir(parents=True, exist_ok=True)
    path.chmod(0o755)
    for name, text in files.items():
        (path / name).write_text(text)
        (path / name).chmod(0o644)
    return path


def service_account_dir(plane: ControlPlane, account: str, into: Path) -> Path:
    """What the kubelet projects into a pod: a token the API server issued for ``account``,
    the cluster's CA and the namespace."""
    assert plane.pki is not None
    response = CoreV1Api(plane.api_client()).create_namespaced_service_account_token(
        account,
        NAMESPACE,
        {"spec": {"expirationSeconds": 3600}},  # type: ignore[arg-type]
        _preload_content=False,
    )
    token = json_of(response)["status"]["token"]
    return readable_dir(
        into,
        {"token": token, "ca.crt": plane.pki.ca_cert.read_text(), "namespace": NAMESPACE},
    )


def in_cluster_env(plane: ControlPlane, pod_name: str) -> dict[str, str]:
    """What a pod's environment says about the API server and itself (downward API)."""
    return {
        "KUBERNETES_SERVICE_HOST": "127.0.0.1",
        "KUBERNETES_SERVICE_PORT": str(plane.api_port),
        "POD_NAME": pod_name,
        "POD_NAMESPACE": NAMESPACE,
    }


def zone_nodes(api: ApiClient, run_id: str, count: int = 3) -> list[str]:
    names = []
    for i in range(count):
        zone = "abc"[i % 3]
        name = f"n-{run_id}-{i}"
        labels = {"topology.kubernetes.io/zone": f"zone-{zone}", "rack": f"rack-{zone}"}
        create_node(api, name, {**labels, "e2e-run": run_id}, cpu="4", memory="8Gi")
        names.append(name)
    return names


def redis_pod(
    api: ApiClient,
    namespace: str,
    name: str,
    labels: Mapping[str, str],
    run_id: str,
    *,
    scheduler_name: str | None = None,
    gates: Sequence[str] = (),
    shard_size: int = 2,
    dry_run: bool = False,
) -> Doc:
    """A Redis pod as a StatefulSet makes it, kept on this test's nodes by a nodeSelector."""
    return create_pod(
        api,
        namespace,
        name,
        labels,
        scheduler_name=scheduler_name,
        gates=gates,
        node_selector={"e2e-run": run_id},
        annotations={"redis-placer.io/shard-size": str(shard_size)},
        dry_run=dry_run,
    )


def pods(api: ApiClient, namespace: str) -> dict[str, Doc]:
    listed = json_of(CoreV1Api(api).list_namespaced_pod(namespace, _preload_content=False))
    return {p["metadata"]["name"]: p for p in listed.get("items") or []}


def wait_for(check: Any, what: str, timeout: float, interval: float = 0.3) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(interval)
    pytest.fail(f"{what}: not within {timeout:.0f}s")


def gates(pod: Doc) -> list[str]:
    return [g["name"] for g in (pod.get("spec") or {}).get("schedulingGates") or []]


def dry_run_gates(api: ApiClient, namespace: str, labels: Mapping[str, str]) -> list[str]:
    """The gates admission would give a new pod with these labels (a dry run: nothing made)."""
    return gates(redis_pod(api, namespace, "admission-probe", labels, "probe", dry_run=True))


def events(api: ApiClient, namespace: str) -> list[Doc]:
    listed = json_of(CoreV1Api(api).list_namespaced_event(namespace, _preload_content=False))
    return list(listed.get("items") or [])


# -- one test's install, and its workloads run as processes ------------------------------

POLICY_MOUNT = "/etc/redis-placer"
REDIS_NAMESPACE_AS_SHIPPED = "redis"


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


def uninstall(plane: ControlPlane, docs: Sequence[Doc]) -> None:
    """The admission policy first (new pods are no longer gated), then everything else."""
    first = [d for d in docs if d["kind"].startswith("MutatingAdmissionPolicy")]
    rest = [d for d in docs if d not in first]
    for group in (first, rest):
        done = kubectl(plane, "delete", "--ignore-not-found", "--wait=false", "-f", "-", docs=group)
        assert done.returncode == 0, done.stderr


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
    return plane.write_kubeconfig(path, account, token)


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
    """A new admission policy takes effect once the API server loads it."""
    wait_for(
        lambda: gate in dry_run_gates(api, namespace, labels),
        "the profile's MutatingAdmissionPolicy to gate a new pod",
        30,
    )
