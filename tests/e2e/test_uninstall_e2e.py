"""Install a profile (gate mode, its MutatingAdmissionPolicy, the maintenance guard's webhook
configuration), lose the binder, uninstall in the documented order, and see that no pod is left
waiting and nothing of the install is left: on a real API server with kube-scheduler,
deploy/profiles/labels applied and deleted with kubectl, `redis-placer release-gates` run as a
user runs it."""

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from models.policy import Policy
from placer.binder.config import PLACEMENT_GATE
from tests.e2e import install
from tests.e2e.control_plane import ControlPlane, set_pod_phase
from tests.e2e.test_profiles_e2e import binder_running

pytestmark = pytest.mark.e2e

PROFILE = "labels"
REDIS_NAMESPACE = "redis"  # listed in deploy/components/redis-namespaces as shipped
OTHER_GATE = "example.com/quota"  # someone else's gate: never lifted by redis-placer
ADMISSION = f"redis-placer-{PROFILE}"
GUARD = "redis-placer-guard"  # deploy/components/guard's ValidatingWebhookConfiguration
GUARD_NOTE = f"note: ValidatingWebhookConfiguration {GUARD} is still installed"


def shard(n: int) -> dict[str, str]:
    return {"app": "redis", "redis-cluster": "redis", "redis-shard": str(n)}


def release_gates(plane: ControlPlane, *args: str) -> subprocess.CompletedProcess[str]:
    policy = str(install.DEPLOY / "profiles" / PROFILE / "policy.yaml")
    command = ["release-gates", "-p", policy, "--kubeconfig", str(plane.kubeconfig), *args]
    return subprocess.run(
        [sys.executable, "-m", "placer.cli", *command],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_uninstall_in_the_safe_order_leaves_no_pod_waiting(
    fresh_control_plane: ControlPlane, run_id: str, tmp_path: Path
) -> None:
    plane = fresh_control_plane
    if not plane.scheduler_running:
        pytest.skip("needs kube-scheduler in KUBEBUILDER_ASSETS: it places the released pods")
    api = plane.api_client()
    docs = install.render(f"profiles/{PROFILE}")
    install.install(plane, docs)
    # what the checks at the end must find gone is there
    assert left_of(plane, docs) == sorted(f"{k.lower()}/{n}" for k, n in cluster_scoped(docs))
    install.wait_for(
        lambda: install.dry_run_gates(api, REDIS_NAMESPACE, shard(9)) == [PLACEMENT_GATE],
        "the profile's admission policy gating new pods",
        30,
    )
    install.zone_nodes(api, run_id)
    policy = Policy.model_validate({"identity": {"profile": PROFILE}})

    # Installed: the binder places shard 0; the pods run.
    with binder_running(plane.api_client(), policy, REDIS_NAMESPACE):
        for i in range(2):
            install.redis_pod(api, REDIS_NAMESPACE, f"s0-{i}", shard(0), run_id)
        install.wait_for(
            lambda: all(
                p["spec"].get("nodeName") for p in install.pods(api, REDIS_NAMESPACE).values()
            ),
            "shard 0 placed by the binder and bound by kube-scheduler",
            60,
        )
    for name in ("s0-0", "s0-1"):
        set_pod_phase(api, REDIS_NAMESPACE, name)
    running = {n: p for n, p in install.pods(api, REDIS_NAMESPACE).items()}

    # The binder is down: new pods are gated at creation and wait.
    for i in range(2):
        install.redis_pod(api, REDIS_NAMESPACE, f"s1-{i}", shard(1), run_id)
    install.redis_pod(api, REDIS_NAMESPACE, "s2-0", shard(2), run_id, gates=[OTHER_GATE])
    time.sleep(3)  # kube-scheduler runs, and still leaves them
    waiting = install.pods(api, REDIS_NAMESPACE)
    assert install.gates(waiting["s1-0"]) == [PLACEMENT_GATE]
    assert install.gates(waiting["s2-0"]) == [OTHER_GATE, PLACEMENT_GATE]
    assert not any(waiting[n]["spec"].get("nodeName") for n in ("s1-0", "s1-1", "s2-0"))

    # How to see them: a dry run lists them (and says the admission policy is still there).
    listed = release_gates(plane, "--dry-run")
    assert listed.stdout.splitlines()[:3] == [
        f"would release {REDIS_NAMESPACE}/s1-0",
        f"would release {REDIS_NAMESPACE}/s1-1",
        f"would release {REDIS_NAMESPACE}/s2-0",
    ]
    assert listed.returncode == 1 and f"note: MutatingAdmissionPolicy {ADMISSION}" in listed.stderr
    assert GUARD_NOTE in listed.stderr  # the guard's webhook configuration goes first

    # The wrong order is refused: the admission policy would gate the next pods again.
    early = release_gates(plane)
    assert early.returncode == 2, early.stderr
    assert f"MutatingAdmissionPolicy {ADMISSION} still gates new pods" in early.stderr
    assert install.gates(install.pods(api, REDIS_NAMESPACE)["s1-0"]) == [PLACEMENT_GATE]

    # 1. the maintenance guard's webhook configuration first
    removed = install.kubectl(plane, "delete", "validatingwebhookconfiguration", GUARD)
    assert removed.returncode == 0, removed.stderr
    # 2. the admission policy
    removed = install.kubectl(
        plane,
        "delete",
        "mutatingadmissionpolicybinding,mutatingadmissionpolicy",
        ADMISSION,
    )
    assert removed.returncode == 0, removed.stderr
    install.wait_for(
        lambda: install.dry_run_gates(api, REDIS_NAMESPACE, shard(9)) == [],
        "new pods created without the gate",
        30,
    )
    # 3. the gates of the pods still waiting
    released = release_gates(plane)
    assert released.returncode == 0, released.stdout + released.stderr
    assert GUARD_NOTE not in released.stderr
    assert released.stdout.splitlines() == [
        f"released {REDIS_NAMESPACE}/s1-0",
        f"released {REDIS_NAMESPACE}/s1-1",
        f"released {REDIS_NAMESPACE}/s2-0",
        "released 3 pod(s); 0 managed pod(s) left waiting",
    ]
    # 4. the rest of the install
    deleted = install.kubectl(
        plane, "delete", "--ignore-not-found", "--wait=false", "-f", "-", docs=docs
    )
    assert deleted.returncode == 0, deleted.stderr
    install.redis_pod(api, REDIS_NAMESPACE, "s3-0", shard(3), run_id)

    def settled() -> bool:
        now = install.pods(api, REDIS_NAMESPACE)
        return all(now[n]["spec"].get("nodeName") for n in ("s1-0", "s1-1", "s3-0"))

    install.wait_for(settled, "the released pods and a new one placed by kube-scheduler", 60)
    after = install.pods(api, REDIS_NAMESPACE)
    for name, pod in running.items():  # never touched
        assert after[name]["metadata"]["resourceVersion"] == pod["metadata"]["resourceVersion"]
    assert install.gates(after["s2-0"]) == [OTHER_GATE]  # waits for its own gate's owner only
    assert install.gates(after["s3-0"]) == []
    stuck = [
        name
        for name, pod in after.items()
        if not pod["spec"].get("nodeName") and install.gates(pod) != [OTHER_GATE]
    ]
    assert stuck == []
    again = release_gates(plane)
    assert again.returncode == 0
    assert again.stdout.splitlines()[-1] == "released 0 pod(s); 0 managed pod(s) left waiting"

    # Nothing of the install is left: no webhook configuration, admission policy or cluster-wide
    # grant, and its namespace gone (or going: no namespace controller runs here to finish it).
    assert left_of(plane, docs) == []
    namespace = install.kubectl(plane, "get", "namespace", install.NAMESPACE, "-o", "json")
    if namespace.returncode == 0:
        assert json.loads(namespace.stdout)["metadata"].get("deletionTimestamp"), namespace.stdout
    else:
        assert "NotFound" in namespace.stderr, namespace.stderr


CLUSTER_SCOPED = {
    "ValidatingWebhookConfiguration": "admissionregistration.k8s.io",
    "MutatingAdmissionPolicy": "admissionregistration.k8s.io",
    "MutatingAdmissionPolicyBinding": "admissionregistration.k8s.io",
    "ClusterRole": "rbac.authorization.k8s.io",
    "ClusterRoleBinding": "rbac.authorization.k8s.io",
}


def cluster_scoped(docs: list[dict[str, Any]]) -> list[tuple[str, str]]:
    """(kind, name) of each cluster-scoped object the install creates, its namespace apart."""
    found = [(d["kind"], d["metadata"]["name"]) for d in docs if d["kind"] in CLUSTER_SCOPED]
    assert ("ValidatingWebhookConfiguration", GUARD) in found
    return found


def left_of(plane: ControlPlane, docs: list[dict[str, Any]]) -> list[str]:
    """Those of them still on the API server, as "kind/name" (the kind in lower case)."""
    names = [f"{k.lower()}.{CLUSTER_SCOPED[k]}/{n}" for k, n in cluster_scoped(docs)]
    got = install.kubectl(plane, "get", *names, "--ignore-not-found", "-o", "name")
    assert got.returncode == 0, got.stderr
    return sorted(
        line.split(".", 1)[0] + "/" + line.rsplit("/", 1)[1] for line in got.stdout.split()
    )
