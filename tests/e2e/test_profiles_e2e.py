"""The deployments people run, put under the binder without touching them.

On a real control plane: StatefulSets shaped exactly as the OT operator, the bitnami chart,
the valkey-io and the hyperspike operators make them (labels, podManagementPolicy, and the OT
operator's order: followers only once every leader is Ready), created for real by the
StatefulSet controller; the profile's MutatingAdmissionPolicy from ``deploy/profiles/NAME``
gates their pods at creation; the binder in gate mode pins them; kube-scheduler binds them; a
kubelet stand-in makes them Ready. The placement is then judged on the deployment's real
pairing by the independent checker. The same pods without the policy, placed by the stock
kube-scheduler alone, are measured beside it (printed, not asserted).
"""

import contextlib
import json
import shutil
import subprocess
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes.client import ApiClient, AppsV1Api, CoreV1Api

from models.cluster import Role
from models.kube_objects import build_snapshot
from models.policy import Policy
from models.snapshot import Snapshot
from placer.binder.loop import PLACEMENT_GATE, Binder, BinderConfig, StepReport, pinned_node
from placer.kube.adapter import KubernetesAdapter
from solver.check import audit
from tests import operator_shapes as shapes
from tests.e2e.control_plane import ControlPlane, create_node, json_of
from tests.e2e.kubelet import KubeletStandIn

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]
RUN_LABEL = "e2e-run"
ZONES = ("a", "b", "c")
RACKS_PER_ZONE = 2
NODES_PER_RACK = 4
READY_WITHIN = 60.0
MAP_API = "/apis/admissionregistration.k8s.io/v1"


@dataclass
class Deployment:
    """How one deployment makes its StatefulSets, in its own order."""

    profile: str
    make: Callable[[dict[str, str]], list[list[dict[str, Any]]]]
    """StatefulSets in waves: a wave is created once every pod of the waves before is Ready."""
    policy: dict[str, Any] = field(default_factory=dict)


def _ot(selector: dict[str, str]) -> list[list[dict[str, Any]]]:
    leader, follower = shapes.ot_operator("cache", leaders=6, followers=6, node_selector=selector)
    return [[leader], [follower]]  # the operator: followers once every leader is Ready


DEPLOYMENTS = {
    "ot-operator": Deployment("ot-operator", _ot),
    "bitnami": Deployment(
        "bitnami", lambda sel: [shapes.bitnami("orders", nodes=12, node_selector=sel)]
    ),
    "valkey-io": Deployment(
        "valkey-io", lambda sel: [shapes.valkey_io("vk", shards=6, replicas=1, node_selector=sel)]
    ),
    "hyperspike": Deployment(
        "hyperspike",
        lambda sel: [shapes.hyperspike("hs", shards=4, replicas=2, node_selector=sel)],
        {"replicasPerShard": 2},
    ),
}


# -- the cluster -----------------------------------------------------------------------------


def create_nodes(api: ApiClient, run_id: str) -> list[str]:
    """24 nodes: 3 zones of 2 racks of 4; the run label keeps other tests' nodes out."""
    names = []
    for zone in ZONES:
        for rack in range(RACKS_PER_ZONE):
            for host in range(NODES_PER_RACK):
                name = f"p-{run_id}-{zone}{rack}{host}"
                labels = {
                    "topology.kubernetes.io/zone": f"zone-{zone}",
                    "rack": f"rack-{zone}{rack}",
                    RUN_LABEL: run_id,
                }
                create_node(api, name, labels, cpu="4", memory="8Gi")
                names.append(name)
    return names


def profile_objects(profile: str) -> list[dict[str, Any]]:
    """The MutatingAdmissionPolicy and its binding as ``deploy/profiles/NAME`` renders them."""
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        pytest.skip("kubectl is not installed: deploy/profiles cannot be rendered")
    rendered = subprocess.run(
        [kubectl, "kustomize", str(ROOT / "deploy" / "profiles" / profile)],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    kinds = {"MutatingAdmissionPolicy", "MutatingAdmissionPolicyBinding"}
    objects = [o for o in yaml.safe_load_all(rendered) if o and o.get("kind") in kinds]
    assert sorted(o["kind"] for o in objects) == sorted(kinds), rendered
    return objects


@contextlib.contextmanager
def admission_policy(api: ApiClient, profile: str, namespace: str) -> Iterator[None]:
    """The profile's policy and binding, the binding narrowed to one namespace (as its comment
    shows a user how) so that the other tests' pods stay untouched; removed afterwards."""
    created: list[str] = []
    try:
        for obj in profile_objects(profile):
            obj = json.loads(json.dumps(obj))
            obj["metadata"]["name"] = f"{obj['metadata']['name']}-{namespace}"
            if obj["kind"] == "MutatingAdmissionPolicyBinding":
                obj["spec"]["policyName"] = f"{obj['spec']['policyName']}-{namespace}"
                match = obj["spec"].setdefault("matchResources", {})
                match["namespaceSelector"] = {
                    "matchLabels": {"kubernetes.io/metadata.name": namespace}
                }
                plural = "mutatingadmissionpolicybindings"
            else:
                plural = "mutatingadmissionpolicies"
            _call(api, "POST", f"{MAP_API}/{plural}", obj)
            created.append(f"{MAP_API}/{plural}/{obj['metadata']['name']}")
        _wait_for_gating(api, namespace, profile)
        yield
    finally:
        for path in reversed(created):
            _call(api, "DELETE", path)


def _call(api: ApiClient, method: str, path: str, body: Any = None) -> dict[str, Any]:
    """Any API path, as the admin: the generated client has no types for every kind here."""
    serialized = api.param_serialize(
        method,
        path,
        header_params={"Content-Type": "application/json", "Accept": "application/json"},
        body=body,
        auth_settings=["BearerToken"],
    )
    response = api.call_api(*serialized[:4])
    response.read()
    if response.status >= 300:
        raise AssertionError(f"{method} {path}: {response.status} {response.data!r}")
    data: dict[str, Any] = json.loads(response.data or b"{}")
    return data


def _wait_for_gating(api: ApiClient, namespace: str, profile: str) -> None:
    """A new policy takes effect after the API server loads it: probe with dry-run creates."""
    labels = Policy.model_validate({"identity": {"profile": profile}}).selector
    probe = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "gate-probe", "namespace": namespace, "labels": dict(labels)},
        "spec": {"containers": [{"name": "c", "image": "redis:7"}]},
    }
    core = CoreV1Api(api)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        made = json_of(
            core.create_namespaced_pod(namespace, probe, dry_run="All", _preload_content=False)  # type: ignore[arg-type]
        )
        gates = [g["name"] for g in (made.get("spec") or {}).get("schedulingGates") or []]
        if PLACEMENT_GATE in gates:
            return
        time.sleep(0.5)
    pytest.fail(f"the {profile} MutatingAdmissionPolicy never gated a pod")


@contextlib.contextmanager
def binder_running(
    api_client: ApiClient, policy: Policy, namespace: str
) -> Iterator[list[StepReport]]:
    adapter = KubernetesAdapter(api_client, instance="e2e-profiles", request_timeout=15)
    binder = Binder(adapter, policy, BinderConfig(enforce="gate", namespace=namespace))
    reports: list[StepReport] = []
    stop = threading.Event()
    thread = threading.Thread(
        target=binder.run, args=(stop,), kwargs={"on_step": reports.append}, daemon=True
    )
    thread.start()
    try:
        yield reports
    finally:
        stop.set()
        thread.join(timeout=30)


# -- one deployment, created as its operator creates it ---------------------------------------


@dataclass
class Outcome:
    seconds: float
    """First create to the last pod Ready."""
    snapshot: Snapshot
    hard: list[str]
    replicas_in_master_zone: int
    most_masters_on_a_node: int
    largest_zone_master_share: float
    pods: list[dict[str, Any]]


def run_deployment(
    api: ApiClient, namespace: str, run_id: str, deployment: Deployment, policy: Policy
) -> Outcome:
    apps = AppsV1Api(api)
    waves = deployment.make({RUN_LABEL: run_id})
    for wave in waves:
        for sts in wave:
            sts["metadata"]["namespace"] = namespace
    expected = sum(s["spec"]["replicas"] for wave in waves for s in wave)
    started = time.monotonic()
    made = 0
    with KubeletStandIn(api, namespace):
        for wave in waves:
            for sts in wave:
                body: Any = sts
                json_of(
                    apps.create_namespaced_stateful_set(namespace, body, _preload_content=False)
                )
            made += sum(s["spec"]["replicas"] for s in wave)
            assert _wait_ready(api, namespace, made, READY_WITHIN), (
                f"{_ready_count(api, namespace)} of {made} pods Ready after {READY_WITHIN:.0f}s"
            )
        seconds = time.monotonic() - started
    pods = _list(api, f"/api/v1/namespaces/{namespace}/pods")
    nodes = [
        n
        for n in _list(api, "/api/v1/nodes")
        if (n["metadata"].get("labels") or {}).get(RUN_LABEL) == run_id
    ]
    sets = _list(api, f"/apis/apps/v1/namespaces/{namespace}/statefulsets")
    snapshot = build_snapshot([*nodes, *sets, *pods], policy)
    assert len(snapshot.members) == expected, snapshot.issues
    return Outcome(seconds, snapshot, *_judge(snapshot, policy), pods)


def _judge(snapshot: Snapshot, policy: Policy) -> tuple[list[str], int, int, float]:
    hard = [v.message for v in audit(snapshot, policy) if v.severity == "hard"]
    zone_of = {n.name: n.zone for n in snapshot.nodes}
    together = 0
    for members in snapshot.shards.values():
        master = next(m for m in members if m.role is Role.MASTER)
        together += sum(
            1
            for m in members
            if m.role is Role.REPLICA
            and zone_of[m.pod.node_name or ""] == zone_of[master.pod.node_name or ""]
        )
    masters = [m for m in snapshot.members if m.role is Role.MASTER]
    per_node = Counter(m.pod.node_name for m in masters)
    per_zone = Counter(zone_of[m.pod.node_name or ""] for m in masters)
    return hard, together, max(per_node.values()), max(per_zone.values()) / len(masters)


def _list(api: ApiClient, path: str) -> list[dict[str, Any]]:
    kind = {"pods": "Pod", "nodes": "Node", "statefulsets": "StatefulSet"}[path.rsplit("/", 1)[1]]
    items = _call(api, "GET", path).get("items") or []
    return [{**item, "kind": kind} for item in items]


def _ready_count(api: ApiClient, namespace: str) -> int:
    return sum(
        1
        for pod in _list(api, f"/api/v1/namespaces/{namespace}/pods")
        if any(
            c.get("type") == "Ready" and c.get("status") == "True"
            for c in (pod.get("status") or {}).get("conditions") or []
        )
    )


def _wait_ready(api: ApiClient, namespace: str, count: int, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if _ready_count(api, namespace) >= count:
            return True
        time.sleep(0.2)
    return _ready_count(api, namespace) >= count


def _prepare(
    control_plane: ControlPlane, api: ApiClient, run_id: str, name: str
) -> tuple[Deployment, Policy]:
    """The deployment, its profile's policy and the 24 nodes; skips without kube-scheduler."""
    if not control_plane.scheduler_running:
        pytest.skip("needs kube-scheduler in KUBEBUILDER_ASSETS: it binds the ungated pods")
    deployment = DEPLOYMENTS[name]
    policy = Policy.model_validate({"identity": {"profile": name, **deployment.policy}})
    create_nodes(api, run_id)
    return deployment, policy


def _described(outcome: Outcome) -> str:
    return (
        f"all Ready in {outcome.seconds:.1f}s, hard violations {len(outcome.hard)}, "
        f"replicas in their master's zone {outcome.replicas_in_master_zone}, "
        f"most masters on a node {outcome.most_masters_on_a_node}, "
        f"largest zone share of masters {outcome.largest_zone_master_share:.0%}"
    )


# -- the tests -------------------------------------------------------------------------------


@pytest.mark.parametrize("name", list(DEPLOYMENTS))
def test_the_deployment_is_placed_by_the_binder_soundly(
    controller_manager: ControlPlane, kube_api: ApiClient, namespace: str, run_id: str, name: str
) -> None:
    deployment, policy = _prepare(controller_manager, kube_api, run_id, name)
    client = controller_manager.api_client()
    with (
        admission_policy(kube_api, name, namespace),
        binder_running(client, policy, namespace) as reports,
    ):
        outcome = run_deployment(kube_api, namespace, run_id, deployment, policy)
    client.close()
    pinned = [p for p in outcome.pods if pinned_node(p) == (p.get("spec") or {}).get("nodeName")]
    print(f"\n{name} with the binder: {_described(outcome)}")
    assert len(pinned) == len(outcome.pods), "every pod is placed by the binder's pin"
    assert outcome.hard == []
    assert outcome.replicas_in_master_zone == 0
    assert outcome.most_masters_on_a_node == 1
    masters = sum(1 for m in outcome.snapshot.members if m.role is Role.MASTER)
    even = -(-masters // len(ZONES)) / masters  # ceil(masters / zones): all a zone need hold
    assert outcome.largest_zone_master_share <= even + 1e-9
    if masters >= 2 * len(ZONES):
        assert outcome.largest_zone_master_share < 0.5  # a zone lost leaves the majority
    assert outcome.seconds <= READY_WITHIN
    rejected = [d for r in reports for d in r.decisions if d.decision == "reject"]
    assert rejected == [], "no shard held past its wait"


@pytest.mark.parametrize("name", list(DEPLOYMENTS))
def test_the_stock_scheduler_alone_on_the_same_pods(
    controller_manager: ControlPlane, kube_api: ApiClient, namespace: str, run_id: str, name: str
) -> None:
    """What the deployment gets without redis-placer: measured for comparison, not judged."""
    deployment, policy = _prepare(controller_manager, kube_api, run_id, name)
    outcome = run_deployment(kube_api, namespace, run_id, deployment, policy)
    print(f"\n{name} with the stock scheduler: {_described(outcome)}")
    assert len(outcome.snapshot.members) == len(outcome.pods)
