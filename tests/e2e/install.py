"""deploy/ installed on a real control plane as a user installs it: rendered by kustomize and
applied (or deleted) with kubectl, the service accounts' tokens issued by the API server."""

import shutil
import subprocess
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes.client import ApiClient, CoreV1Api

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
        create_namespace(api, namespace)
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
