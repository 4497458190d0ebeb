"""The real adapter against a real kube-apiserver: the server's own rules, not our reading of them.

Skipped unless KUBEBUILDER_ASSETS points at etcd and kube-apiserver binaries.
"""

import shutil
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes.client import ApiClient, CoreV1Api, PolicyV1Api, RbacAuthorizationV1Api
from kubernetes.client.exceptions import ApiException

from models.kube_objects import build_snapshot
from models.policy import Policy
from placer.kube.adapter import (
    BindOutcome,
    EvictOutcome,
    KubernetesAdapter,
    PatchOutcome,
)
from placer.kube.config import load_api_client
from placer.kube.leader import ApiLeaseClient, LeaderConfig, LeaderElector
from placer.kube.pdb import BINDER_MANAGER, MANAGED_BY, shard_pdb
from tests.e2e.control_plane import (
    NOT_READY_TAINT,
    ControlPlane,
    create_namespace,
    create_node,
    create_pod,
    json_of,
    set_pod_phase,
)

pytestmark = pytest.mark.e2e

GATE = "redis-placer.io/placement"
REDIS = {"app": "redis", "redis-cluster": "c", "redis-shard": "0"}
DEPLOY = Path(__file__).resolve().parents[2] / "deploy"


def wait_for(check: Callable[[], bool], timeout: float = 30.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(0.1)
    return False


def nodes_for(kube_api: ApiClient, run_id: str, count: int = 2) -> list[str]:
    names = [f"node-{run_id}-{i}" for i in range(count)]
    for i, name in enumerate(names):
        create_node(kube_api, name, {"topology.kubernetes.io/zone": f"z{i}", "e2e-run": run_id})
    return names


def pinned_terms(pod: dict[str, Any]) -> list[dict[str, Any]]:
    terms: list[dict[str, Any]] = pod["spec"]["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"
    ]["nodeSelectorTerms"]
    return terms


# -- reading ---------------------------------------------------------------------------------


def test_lists_are_kubectl_shaped_and_parse_into_a_snapshot(
    kube_api: ApiClient, kube_adapter: KubernetesAdapter, namespace: str, run_id: str
) -> None:
    names = nodes_for(kube_api, run_id)
    for i in range(2):
        create_pod(
            kube_api,
            namespace,
            f"redis-{i}",
            REDIS,
            scheduler_name="redis-placer",
            annotations={"redis-placer.io/shard-size": "2"},
        )
    nodes = kube_adapter.list_nodes(label_selector=f"e2e-run={run_id}")
    pods, version = kube_adapter.list_pods_with_version(namespace)
    assert sorted(n["metadata"]["name"] for n in nodes) == names
    assert version
    for node in nodes:
        assert node["kind"] == "Node" and node["apiVersion"] == "v1"
        assert node["status"]["allocatable"]["cpu"] == "8"
        assert {"type": "Ready", "status": "True"}.items() <= node["status"]["conditions"][
            0
        ].items()
        assert NOT_READY_TAINT not in [t["key"] for t in node["spec"].get("taints") or []]
    assert {p["kind"] for p in pods} == {"Pod"}
    assert {p["spec"]["schedulerName"] for p in pods} == {"redis-placer"}
    assert all("nodeName" not in p["spec"] for p in pods)
    # paging returns the same pods
    paged = KubernetesAdapter(kube_api, page_size=1).list_pods(namespace)
    assert sorted(p["metadata"]["name"] for p in paged) == ["redis-0", "redis-1"]

    snapshot = build_snapshot([*nodes, *pods], Policy())
    assert [n.name for n in snapshot.nodes] == names
    assert all(n.ready and not n.taints for n in snapshot.nodes)
    assert len(snapshot.pending) == 2


def test_kubeconfig_written_by_the_harness_loads(control_plane: ControlPlane) -> None:
    client = load_api_client(str(control_plane.kubeconfig))
    assert KubernetesAdapter(client).list_nodes(label_selector="none-such=x") == []


# -- binding ---------------------------------------------------------------------------------


def test_a_pod_is_bound_once(
    kube_api: ApiClient, kube_adapter: KubernetesAdapter, namespace: str, run_id: str
) -> None:
    first, second = nodes_for(kube_api, run_id)
    pod = create_pod(kube_api, namespace, "p", REDIS, scheduler_name="redis-placer")
    uid = pod["metadata"]["uid"]
    result = kube_adapter.bind_pod(namespace, "p", uid, first)
    assert result.outcome is BindOutcome.BOUND, result
    again = kube_adapter.bind_pod(namespace, "p", uid, second)
    assert again.outcome is BindOutcome.CONFLICT
    assert again.bound_node == first  # the server names where it already is
    stored = kube_adapter.get_pod(namespace, "p")
    assert stored is not None and stored["spec"]["nodeName"] == first
    assert kube_adapter.bind_pod(namespace, "absent", None, first).outcome is BindOutcome.GONE


def test_the_uid_precondition_protects_a_recreated_pod(
    kube_api: ApiClient, kube_adapter: KubernetesAdapter, namespace: str, run_id: str
) -> None:
    (node,) = nodes_for(kube_api, run_id, 1)
    create_pod(kube_api, namespace, "p", REDIS, scheduler_name="redis-placer")
    result = kube_adapter.bind_pod(namespace, "p", "00000000-0000-0000-0000-000000000000", node)
    assert result.outcome is BindOutcome.CONFLICT and result.bound_node is None
    stored = kube_adapter.get_pod(namespace, "p")
    assert stored is not None and "nodeName" not in stored["spec"]


def test_concurrent_binds_bind_exactly_once(
    kube_api: ApiClient, kube_adapter: KubernetesAdapter, namespace: str, run_id: str
) -> None:
    names = nodes_for(kube_api, run_id, 4)
    pod = create_pod(kube_api, namespace, "p", REDIS, scheduler_name="redis-placer")
    results: list[Any] = []
    barrier = threading.Barrier(len(names))

    def bind(node: str) -> None:
        barrier.wait()
        results.append((node, kube_adapter.bind_pod(namespace, "p", pod["metadata"]["uid"], node)))

    threads = [threading.Thread(target=bind, args=(n,)) for n in names]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    winners = [node for node, r in results if r.outcome is BindOutcome.BOUND]
    assert len(winners) == 1, results
    assert all(
        r.outcome is BindOutcome.CONFLICT for _, r in results if r.outcome is not BindOutcome.BOUND
    )
    stored = kube_adapter.get_pod(namespace, "p")
    assert stored is not None and stored["spec"]["nodeName"] == winners[0]


def test_a_bindings_annotations_land_on_the_pod_in_the_same_write(
    kube_api: ApiClient, kube_adapter: KubernetesAdapter, namespace: str, run_id: str
) -> None:
    """The role rides in the Binding: one write gives the pod its node and its annotations."""
    (name,) = nodes_for(kube_api, run_id, 1)
    pod = create_pod(kube_api, namespace, "p", REDIS, scheduler_name="redis-placer")
    _, version = kube_adapter.list_pods_with_version(namespace)
    notes = {"redis-placer.io/role": "master", "redis-placer.io/batch": "run-1"}
    assert kube_adapter.bind_pod(namespace, "p", pod["metadata"]["uid"], name, notes).ok
    changes = [
        e for e in kube_adapter.watch_pods(namespace, resource_version=version, timeout_seconds=2)
    ]
    (change,) = [e for e in changes if e.type != "BOOKMARK"]
    assert change.type == "MODIFIED" and change.object["spec"]["nodeName"] == name
    assert change.object["metadata"]["annotations"] == notes


def test_a_label_patch_guarded_by_a_resource_version_refuses_a_newer_pod(
    kube_adapter: KubernetesAdapter, kube_api: ApiClient, namespace: str
) -> None:
    pod = create_pod(kube_api, namespace, "p", REDIS, scheduler_name="redis-placer")
    old = pod["metadata"]["resourceVersion"]
    assert kube_adapter.patch_pod_labels(namespace, "p", {"redis-role": "replica"}).ok
    stale = kube_adapter.patch_pod_labels(namespace, "p", {"redis-role": "master"}, old)
    assert stale.outcome is PatchOutcome.CONFLICT and stale.status == 409
    stored = kube_adapter.get_pod(namespace, "p")
    assert stored is not None and stored["metadata"]["labels"]["redis-role"] == "replica"
    fresh = kube_adapter.patch_pod_labels(
        namespace, "p", {"redis-role": "master"}, stored["metadata"]["resourceVersion"]
    )
    assert fresh.ok and fresh.pod is not None
    assert fresh.pod["metadata"]["labels"]["redis-role"] == "master"


# -- gating ----------------------------------------------------------------------------------


def test_gated_pod_is_pinned_and_ungated_in_one_update(
    control_plane: ControlPlane,
    kube_api: ApiClient,
    kube_adapter: KubernetesAdapter,
    namespace: str,
    run_id: str,
) -> None:
    first, _ = nodes_for(kube_api, run_id)
    pod = create_pod(kube_api, namespace, "g", REDIS, gates=[GATE])
    assert kube_adapter.bind_pod(namespace, "g", None, first).outcome is BindOutcome.CONFLICT
    version = pod["metadata"]["resourceVersion"]
    result = kube_adapter.pin_and_ungate(namespace, "g", first, GATE, version)
    assert result.outcome is PatchOutcome.PATCHED, result
    stored = kube_adapter.get_pod(namespace, "g")
    assert stored is not None
    assert not stored["spec"].get("schedulingGates")
    assert pinned_terms(stored) == [
        {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [first]}]}
    ]
    # The pod as read, passed along: kube-scheduler may bind it (a newer version) any moment.
    current = kube_adapter.get_pod(namespace, "g")
    assert current is not None
    again = kube_adapter.pin_and_ungate(
        namespace, "g", first, GATE, current["metadata"]["resourceVersion"], current
    )
    assert again.outcome is PatchOutcome.NOT_GATED
    if control_plane.scheduler_running:
        assert wait_for(
            lambda: (kube_adapter.get_pod(namespace, "g") or {})["spec"].get("nodeName") == first
        )


def test_pin_adds_to_existing_terms_which_a_gated_pod_allows(
    kube_api: ApiClient, kube_adapter: KubernetesAdapter, namespace: str, run_id: str
) -> None:
    first, _ = nodes_for(kube_api, run_id)
    pod = create_pod(kube_api, namespace, "g", REDIS, gates=[GATE, "other.io/gate"])
    zone_term = {
        "matchExpressions": [
            {"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["z0", "z1"]}
        ]
    }
    affinity = {
        "spec": {
            "affinity": {
                "nodeAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": {
                        "nodeSelectorTerms": [zone_term]
                    }
                }
            }
        }
    }
    resp = CoreV1Api(kube_api).patch_namespaced_pod(
        "g",
        namespace,
        affinity,
        _content_type="application/merge-patch+json",
        _preload_content=False,
    )
    patched_pod = json_of(resp)  # a gated pod without affinity may get one
    result = kube_adapter.pin_and_ungate(
        namespace, "g", first, GATE, patched_pod["metadata"]["resourceVersion"], pod=patched_pod
    )
    assert result.outcome is PatchOutcome.PATCHED, result
    stored = kube_adapter.get_pod(namespace, "g")
    assert stored is not None
    assert stored["spec"]["schedulingGates"] == [{"name": "other.io/gate"}]
    (term,) = pinned_terms(stored)
    assert term["matchExpressions"] == zone_term["matchExpressions"]
    assert term["matchFields"] == [{"key": "metadata.name", "operator": "In", "values": [first]}]
    assert pod["metadata"]["uid"] == stored["metadata"]["uid"]


def test_pin_conflicts_when_the_pod_changed_since_it_was_read(
    kube_api: ApiClient, kube_adapter: KubernetesAdapter, namespace: str, run_id: str
) -> None:
    first, _ = nodes_for(kube_api, run_id)
    pod = create_pod(kube_api, namespace, "g", REDIS, gates=[GATE])
    assert kube_adapter.patch_pod_labels(namespace, "g", {"touched": "yes"}).ok
    stale = pod["metadata"]["resourceVersion"]
    result = kube_adapter.pin_and_ungate(namespace, "g", first, GATE, stale, pod=pod)
    assert result.outcome is PatchOutcome.CONFLICT, result  # the server honours the version
    stored = kube_adapter.get_pod(namespace, "g")
    assert stored is not None and stored["spec"]["schedulingGates"] == [{"name": GATE}]


# -- events, labels, configmaps, watch -------------------------------------------------------


def test_events_are_recorded_on_the_pod(
    kube_api: ApiClient, kube_adapter: KubernetesAdapter, namespace: str
) -> None:
    pod = create_pod(kube_api, namespace, "p", REDIS, scheduler_name="redis-placer")
    assert kube_adapter.record_event(pod, "Waiting", "shard c/0: 1 of 2 members present", "Normal")
    assert kube_adapter.record_event(pod, "Unplaceable", "no node fits", "Warning")
    resp = CoreV1Api(kube_api).list_namespaced_event(
        namespace, field_selector="involvedObject.name=p", _preload_content=False
    )
    events = sorted(json_of(resp)["items"], key=lambda e: e["reason"])
    assert [(e["reason"], e["type"]) for e in events] == [
        ("Unplaceable", "Warning"),
        ("Waiting", "Normal"),
    ]
    assert events[1]["involvedObject"]["uid"] == pod["metadata"]["uid"]
    assert events[1]["source"]["component"] == "redis-placer"
    assert events[1]["reportingInstance"] == "e2e"


def test_labels_configmaps_and_watch(
    kube_api: ApiClient, kube_adapter: KubernetesAdapter, namespace: str, run_id: str
) -> None:
    (node,) = nodes_for(kube_api, run_id, 1)
    create_pod(
        kube_api, namespace, "p", {**REDIS, "redis-role": "replica"}, scheduler_name="redis-placer"
    )
    _, version = kube_adapter.list_pods_with_version(namespace)
    assert kube_adapter.patch_pod_labels(namespace, "p", {"redis-role": "master", "app": None}).ok
    stored = kube_adapter.get_pod(namespace, "p")
    assert stored is not None
    assert stored["metadata"]["labels"]["redis-role"] == "master"
    assert "app" not in stored["metadata"]["labels"]
    assert kube_adapter.bind_pod(namespace, "p", None, node).ok
    seen = []
    for event in kube_adapter.watch_pods(namespace, resource_version=version, timeout_seconds=5):
        if event.type == "BOOKMARK":
            continue
        seen.append(event)
        if event.object["spec"].get("nodeName") == node:
            break
    assert [e.type for e in seen] == ["MODIFIED", "MODIFIED"]
    assert seen[-1].object["kind"] == "Pod"

    assert kube_adapter.write_configmap(namespace, "report", {"a": "1"}) == "created"
    assert kube_adapter.write_configmap(namespace, "report", {"a": "2"}) == "replaced"
    assert kube_adapter.read_configmap(namespace, "report") == {"a": "2"}


# -- eviction --------------------------------------------------------------------------------


def test_eviction_respects_pod_disruption_budgets(
    kube_api: ApiClient, kube_adapter: KubernetesAdapter, namespace: str, run_id: str
) -> None:
    (node,) = nodes_for(kube_api, run_id, 1)
    guarded = create_pod(kube_api, namespace, "guarded", {**REDIS, "pdb": "yes"}, node_name=node)
    free = create_pod(kube_api, namespace, "free", REDIS, node_name=node)
    for name in ("guarded", "free"):
        set_pod_phase(kube_api, namespace, name, "Running")  # pending pods skip PDB checks
    PolicyV1Api(kube_api).create_namespaced_pod_disruption_budget(
        namespace,
        {  # type: ignore[arg-type]
            "apiVersion": "policy/v1",
            "kind": "PodDisruptionBudget",
            "metadata": {"name": "redis-0"},
            "spec": {"minAvailable": 1, "selector": {"matchLabels": {"pdb": "yes"}}},
        },
        _preload_content=False,
    )
    # no disruption controller runs here, so the budget is never "observed": always blocked
    blocked = kube_adapter.evict_pod(namespace, "guarded", guarded["metadata"]["uid"])
    assert blocked.outcome is EvictOutcome.BLOCKED, blocked
    assert "disruption budget" in blocked.message

    assert kube_adapter.evict_pod(namespace, "free", "not-its-uid").outcome is EvictOutcome.GONE
    evicted = kube_adapter.evict_pod(namespace, "free", free["metadata"]["uid"])
    assert evicted.outcome is EvictOutcome.EVICTED, evicted
    after = kube_adapter.get_pod(namespace, "free")
    assert after is None or after["metadata"].get("deletionTimestamp")
    assert kube_adapter.evict_pod(namespace, "absent").outcome is EvictOutcome.GONE


def test_shard_budgets_are_created_listed_and_deleted(
    kube_adapter: KubernetesAdapter, namespace: str
) -> None:
    body = shard_pdb(Policy(), namespace, "c", "0", labels={MANAGED_BY: BINDER_MANAGER})
    assert kube_adapter.create_pdb(namespace, body) == "created"
    assert kube_adapter.create_pdb(namespace, body) == "exists"
    (listed,) = kube_adapter.list_pdbs(namespace)
    assert listed["kind"] == "PodDisruptionBudget" and listed["apiVersion"] == "policy/v1"
    assert listed["spec"]["minAvailable"] == 0  # a shard of one (no pod names given)
    assert listed["spec"]["selector"] == body["spec"]["selector"]
    assert listed["metadata"]["labels"][MANAGED_BY] == BINDER_MANAGER
    name = body["metadata"]["name"]
    assert not kube_adapter.delete_pdb(namespace, name, "not-its-uid")  # uid precondition
    assert kube_adapter.delete_pdb(namespace, name, listed["metadata"]["uid"])
    assert not kube_adapter.delete_pdb(namespace, name)
    assert kube_adapter.list_pdbs(namespace) == []


# -- leader election -------------------------------------------------------------------------


def test_leader_election_on_a_real_lease(kube_api: ApiClient, namespace: str) -> None:
    config = LeaderConfig(lease_duration=3, renew_deadline=2, retry_period=0.2)
    a = LeaderElector(ApiLeaseClient(kube_api, namespace, "binder"), "a", config)
    b = LeaderElector(ApiLeaseClient(kube_api, namespace, "binder"), "b", config)
    assert a.try_acquire_or_renew()
    assert not b.try_acquire_or_renew()
    assert a.try_acquire_or_renew()  # renew: MicroTime accepted by the server
    lease = ApiLeaseClient(kube_api, namespace, "binder").get()
    assert lease is not None
    assert lease["spec"]["holderIdentity"] == "a"
    stop = threading.Event()
    thread = threading.Thread(target=b.run, args=(lambda: None, lambda: None, stop))
    thread.start()
    assert a.release()
    assert wait_for(lambda: b.is_leader, timeout=config.lease_duration)
    stop.set()
    thread.join(timeout=5)
    assert not thread.is_alive()


# -- the deploy/ RBAC, enforced by a real authorizer -----------------------------------------


def _apply_rbac(kube_api: ApiClient, redis_namespace: str) -> None:
    """deploy/'s RBAC, with ``redis_namespace`` listed as the namespace that holds Redis (as a
    user lists theirs in deploy/components/redis-namespaces)."""
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        pytest.skip("kubectl is not on PATH: cannot render deploy/")
    rendered = subprocess.run(
        [kubectl, "kustomize", str(DEPLOY)], capture_output=True, text=True, check=True, timeout=120
    ).stdout
    rbac = RbacAuthorizationV1Api(kube_api)
    create: dict[str, Callable[..., Any]] = {
        "ClusterRole": rbac.create_cluster_role,
        "ClusterRoleBinding": rbac.create_cluster_role_binding,
        "Role": lambda body, **kw: rbac.create_namespaced_role(
            body["metadata"]["namespace"], body, **kw
        ),
        "RoleBinding": lambda body, **kw: rbac.create_namespaced_role_binding(
            body["metadata"]["namespace"], body, **kw
        ),
    }
    try:
        create_namespace(kube_api, "redis-placer")
    except ApiException as exc:
        if exc.status != 409:
            raise
    for doc in yaml.safe_load_all(rendered):
        if not doc or doc["kind"] not in create:
            continue
        if doc["kind"] == "RoleBinding" and doc["metadata"]["namespace"] != "redis-placer":
            doc["metadata"]["namespace"] = redis_namespace
        try:
            create[doc["kind"]](doc, _preload_content=False)
        except ApiException as exc:
            if exc.status != 409:
                raise


def _as(control_plane: ControlPlane, account: str) -> KubernetesAdapter:
    client = ApiClient(
        control_plane.configuration(),
        header_name="Impersonate-User",
        header_value=f"system:serviceaccount:redis-placer:{account}",
    )
    return KubernetesAdapter(client, instance=account)


def test_deploy_rbac_allows_the_binder_exactly_its_calls(
    control_plane: ControlPlane, kube_api: ApiClient, namespace: str, run_id: str
) -> None:
    _apply_rbac(kube_api, namespace)
    (node,) = nodes_for(kube_api, run_id, 1)
    pod = create_pod(kube_api, namespace, "p", REDIS, scheduler_name="redis-placer")
    gated = create_pod(kube_api, namespace, "g", REDIS, gates=[GATE])
    elsewhere = f"{namespace}-x"
    create_namespace(kube_api, elsewhere)
    outside = create_pod(kube_api, elsewhere, "o", REDIS, gates=[GATE])
    binder = _as(control_plane, "redis-placer-binder")
    assert binder.list_nodes(label_selector=f"e2e-run={run_id}")
    assert binder.list_pods(namespace)
    assert binder.list_statefulsets() is not None
    list(binder.watch_pods(namespace, timeout_seconds=1))
    assert binder.bind_pod(namespace, "p", pod["metadata"]["uid"], node).ok
    assert binder.pin_and_ungate(
        namespace, "g", node, GATE, gated["metadata"]["resourceVersion"]
    ).ok
    assert binder.record_event(pod, "Placed", "ok")
    lease = LeaderElector(ApiLeaseClient(binder.api_client, "redis-placer", "e2e-binder"), "x")
    assert lease.try_acquire_or_renew() and lease.try_acquire_or_renew()
    refused = binder.evict_pod(namespace, "p")
    assert refused.outcome is EvictOutcome.ERROR and refused.status == 403
    with pytest.raises(Exception, match="403"):
        binder.list_pdbs(namespace)  # only with deploy/components/manage-pdbs
    # Outside the namespaces that hold Redis it reads pods, and writes none.
    assert binder.list_pods(elsewhere)
    version = outside["metadata"]["resourceVersion"]
    refused_pin = binder.pin_and_ungate(elsewhere, "o", node, GATE, version, pod=outside)
    assert refused_pin.outcome is PatchOutcome.ERROR and refused_pin.status == 403
    refused_label = binder.patch_pod_labels(elsewhere, "o", {"redis-role": "master"})
    assert refused_label.status == 403
    assert not binder.record_event(outside, "Placed", "not here")


def test_deploy_rbac_refuses_the_binder_a_binding_outside_the_redis_namespaces(
    control_plane: ControlPlane, kube_api: ApiClient, namespace: str, run_id: str
) -> None:
    """The binder binds Redis pods alone: the authorizer refuses its Binding of a pod in a
    namespace deploy/components/redis-namespaces does not list, even one that names
    redis-placer as its scheduler, and the pod stays unbound; in the listed one it binds."""
    _apply_rbac(kube_api, namespace)
    (node,) = nodes_for(kube_api, run_id, 1)
    elsewhere = f"{namespace}-b"
    create_namespace(kube_api, elsewhere)
    outside = create_pod(kube_api, elsewhere, "o", REDIS, scheduler_name="redis-placer")
    inside = create_pod(kube_api, namespace, "p", REDIS, scheduler_name="redis-placer")
    binder = _as(control_plane, "redis-placer-binder")
    refused = binder.bind_pod(elsewhere, "o", outside["metadata"]["uid"], node)
    assert refused.outcome is BindOutcome.ERROR and refused.status == 403, refused
    assert "pods/binding" in refused.message, refused.message
    core = CoreV1Api(kube_api)
    unbound = json_of(core.read_namespaced_pod("o", elsewhere, _preload_content=False))
    assert not unbound["spec"].get("nodeName")
    assert binder.bind_pod(namespace, "p", inside["metadata"]["uid"], node).ok
    bound = json_of(core.read_namespaced_pod("p", namespace, _preload_content=False))
    assert bound["spec"]["nodeName"] == node


def test_deploy_rbac_allows_rebalance_exactly_its_calls(
    control_plane: ControlPlane, kube_api: ApiClient, namespace: str, run_id: str
) -> None:
    _apply_rbac(kube_api, namespace)
    (node,) = nodes_for(kube_api, run_id, 1)
    pod = create_pod(kube_api, namespace, "p", REDIS, node_name=node)
    elsewhere = f"{namespace}-x"
    create_namespace(kube_api, elsewhere)
    outside = create_pod(kube_api, elsewhere, "o", REDIS, node_name=node)
    rebalance = _as(control_plane, "redis-placer-rebalance")
    assert rebalance.list_pods(namespace) and rebalance.list_nodes()
    assert rebalance.patch_pod_labels(namespace, "p", {"redis-role": "master"}).ok
    assert (
        rebalance.write_configmap("redis-placer", f"report-{run_id}", {"plan": "{}"}) == "created"
    )
    assert rebalance.read_configmap("redis-placer", f"report-{run_id}") == {"plan": "{}"}
    assert rebalance.evict_pod(namespace, "p", pod["metadata"]["uid"]).ok
    refused = rebalance.bind_pod(namespace, "p", None, node)
    assert refused.outcome is BindOutcome.ERROR and refused.status == 403
    with pytest.raises(Exception, match="403"):
        rebalance.write_configmap(namespace, "elsewhere", {})  # only its own namespace
    # Outside the namespaces that hold Redis it reads pods, and evicts or labels none.
    assert rebalance.list_pods(elsewhere)
    refused_eviction = rebalance.evict_pod(elsewhere, "o", outside["metadata"]["uid"])
    assert refused_eviction.outcome is EvictOutcome.ERROR and refused_eviction.status == 403
    assert rebalance.patch_pod_labels(elsewhere, "o", {"redis-role": "master"}).status == 403
