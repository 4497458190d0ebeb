"""Volumes end to end: the binder in gate mode, kube-scheduler binding pods and claims.

Pods with claims of a ``WaitForFirstConsumer`` class are pinned where their PVs are and
kube-scheduler binds them (its VolumeBinding plugin binds the claims on the pinned node); a pod
whose claim is bound goes where its PV is; a provisioned class keeps pods in its allowed zones;
and a pin kube-scheduler refuses is noticed, the pod recreated and placed elsewhere.

Skipped unless KUBEBUILDER_ASSETS holds etcd, kube-apiserver and kube-scheduler. The controllers
kube-controller-manager would run are stand-ins here, each doing only its part: the PV
controller's (finish a binding kube-scheduler started: claim ``volumeName``, ``bind-completed``),
a provisioner's (a PV in the selected node's zone), the StatefulSet controller's (a claim per
pod, a deleted pod recreated) and the kubelet's (a bound pod Running and Ready).
"""

import secrets
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import pytest
from kubernetes.client import ApiClient, CoreV1Api, StorageV1Api

from models.policy import Policy
from placer.binder.loop import PLACEMENT_GATE, Binder, BinderConfig, pinned_node
from placer.kube.adapter import DEFAULT_COMPONENT, KubernetesAdapter
from tests.e2e.control_plane import ControlPlane, create_node, json_of

pytestmark = pytest.mark.e2e

POLICY = Policy()
ZONE = POLICY.topology.zone
HOST = "kubernetes.io/hostname"
RUN_LABEL = "e2e-run"
MERGE = "application/merge-patch+json"
BIND_COMPLETED = "pv.kubernetes.io/bind-completed"
SELECTED_NODE = "volume.kubernetes.io/selected-node"
PROVISIONER = "e2e.redis-placer.io/zonal"
Obj = dict[str, Any]


@pytest.fixture(autouse=True)
def _needs_scheduler(control_plane: ControlPlane) -> None:
    if not control_plane.scheduler_running:
        pytest.skip("kube-scheduler is not in KUBEBUILDER_ASSETS: nothing binds pods or claims")


# -- objects ---------------------------------------------------------------------------------


def make_nodes(api: ApiClient, run_id: str, count: int) -> list[str]:
    """``count`` nodes over zones a, b, c (node i in zone i mod 3), one host each."""
    names = []
    for i in range(count):
        name = f"v-{run_id}-{i}"
        labels = {
            ZONE: f"zone-{'abc'[i % 3]}",
            POLICY.topology.rack: f"rack-{i}",
            RUN_LABEL: run_id,
        }
        create_node(api, name, labels, cpu="4", memory="8Gi")
        names.append(name)
    return names


def make_class(api: ApiClient, name: str, provisioner: str, zones: tuple[str, ...] = ()) -> None:
    body: Obj = {
        "apiVersion": "storage.k8s.io/v1",
        "kind": "StorageClass",
        "metadata": {"name": name},
        "provisioner": provisioner,
        "volumeBindingMode": "WaitForFirstConsumer",
    }
    if zones:
        body["allowedTopologies"] = [
            {"matchLabelExpressions": [{"key": ZONE, "values": list(zones)}]}
        ]
    json_of(StorageV1Api(api).create_storage_class(body, _preload_content=False))  # type: ignore[arg-type]


def make_pv(
    api: ApiClient,
    name: str,
    storage_class: str,
    *,
    node: str | None = None,
    zone: str | None = None,
    claim: tuple[str, str] | None = None,
) -> None:
    key, value = (HOST, node) if node is not None else (ZONE, zone)
    spec: Obj = {
        "storageClassName": storage_class,
        "capacity": {"storage": "10Gi"},
        "accessModes": ["ReadWriteOnce"],
        "persistentVolumeReclaimPolicy": "Retain",
        "local": {"path": "/mnt/nvme0"},
        "nodeAffinity": {
            "required": {
                "nodeSelectorTerms": [
                    {"matchExpressions": [{"key": key, "operator": "In", "values": [value]}]}
                ]
            }
        },
    }
    if claim is not None:
        spec["claimRef"] = {"namespace": claim[0], "name": claim[1]}
    body = {
        "apiVersion": "v1",
        "kind": "PersistentVolume",
        "metadata": {"name": name},
        "spec": spec,
    }
    core = CoreV1Api(api)
    json_of(core.create_persistent_volume(body, _preload_content=False))  # type: ignore[arg-type]
    phase = "Bound" if claim is not None else "Available"  # as the PV controller marks it
    core.patch_persistent_volume_status(
        name, {"status": {"phase": phase}}, _content_type=MERGE, _preload_content=False
    )


def make_claim(
    api: ApiClient, namespace: str, name: str, storage_class: str, volume: str | None = None
) -> None:
    spec: Obj = {
        "storageClassName": storage_class,
        "accessModes": ["ReadWriteOnce"],
        "resources": {"requests": {"storage": "5Gi"}},
    }
    if volume is not None:
        spec["volumeName"] = volume
    body = {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": name, "namespace": namespace},
        "spec": spec,
    }
    core = CoreV1Api(api)
    json_of(core.create_namespaced_persistent_volume_claim(namespace, body, _preload_content=False))  # type: ignore[arg-type]


def pod_body(
    name: str,
    shard: int,
    run_id: str,
    claim: str | None,
    *,
    host_port: int | None = None,
    memory: str = "512Mi",
) -> Obj:
    """A gated member of ``redis`` shard ``shard`` (the solver picks roles), owned as a
    StatefulSet's pod is, mounting ``claim``."""
    labels = {**POLICY.selector, POLICY.labels.cluster: "redis", POLICY.labels.shard: str(shard)}
    container: Obj = {
        "name": "redis",
        "image": "redis:7.2",
        "resources": {"requests": {"cpu": "250m", "memory": memory}},
    }
    if host_port is not None:
        container["ports"] = [{"containerPort": 6379, "hostPort": host_port}]
    spec: Obj = {
        "containers": [container],
        "nodeSelector": {RUN_LABEL: run_id},
        "terminationGracePeriodSeconds": 0,
        "schedulingGates": [{"name": PLACEMENT_GATE}],
    }
    if claim is not None:
        spec["volumes"] = [{"name": "data", "persistentVolumeClaim": {"claimName": claim}}]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "labels": labels,
            "annotations": {"redis-placer.io/shard-size": "1" if claim is None else "2"},
            "ownerReferences": [
                {
                    "apiVersion": "apps/v1",
                    "kind": "StatefulSet",
                    "name": f"redis-{shard}",
                    "uid": "00000000-0000-0000-0000-000000000000",
                    "controller": True,
                }
            ],
        },
        "spec": spec,
    }


def create(api: ApiClient, namespace: str, body: Obj) -> Obj:
    return json_of(
        CoreV1Api(api).create_namespaced_pod(namespace, body, _preload_content=False)  # type: ignore[arg-type]
    )


def pods_of(api: ApiClient, namespace: str) -> dict[str, Obj]:
    items = json_of(CoreV1Api(api).list_namespaced_pod(namespace, _preload_content=False))["items"]
    return {p["metadata"]["name"]: p for p in items}


def claims_of(api: ApiClient, namespace: str) -> dict[str, Obj]:
    core = CoreV1Api(api)
    resp = core.list_namespaced_persistent_volume_claim(namespace, _preload_content=False)
    return {c["metadata"]["name"]: c for c in json_of(resp)["items"]}


def volumes(api: ApiClient) -> dict[str, Obj]:
    resp = CoreV1Api(api).list_persistent_volume(_preload_content=False)
    return {v["metadata"]["name"]: v for v in json_of(resp)["items"]}


def events_of(api: ApiClient, namespace: str) -> list[Obj]:
    resp = CoreV1Api(api).list_namespaced_event(namespace, _preload_content=False)
    items: list[Obj] = json_of(resp)["items"]
    return items


def running(pod: Mapping[str, Any]) -> bool:
    return (pod.get("status") or {}).get("phase") == "Running"


def wait_for(check: Callable[[], bool], timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(0.25)
    return check()


# -- the stand-ins ---------------------------------------------------------------------------


def _finish_bindings(api: ApiClient, namespace: str) -> None:
    """The PV controller's part: a new PV becomes Available, and a PV whose claimRef
    kube-scheduler set binds its claim."""
    core = CoreV1Api(api)
    claims = claims_of(api, namespace)
    for pv in volumes(api).values():
        ref = pv["spec"].get("claimRef") or {}
        if not ref and (pv.get("status") or {}).get("phase") == "Pending":  # new: Available
            core.patch_persistent_volume_status(
                pv["metadata"]["name"],
                {"status": {"phase": "Available"}},
                _content_type=MERGE,
                _preload_content=False,
            )
        claim = claims.get(ref.get("name", "")) if ref.get("namespace") == namespace else None
        if claim is None:
            continue
        name = pv["metadata"]["name"]
        if claim["spec"].get("volumeName") != name or BIND_COMPLETED not in (
            claim["metadata"].get("annotations") or {}
        ):
            core.patch_namespaced_persistent_volume_claim(
                claim["metadata"]["name"],
                namespace,
                {
                    "metadata": {"annotations": {BIND_COMPLETED: "yes"}},
                    "spec": {"volumeName": name},
                },
                _content_type=MERGE,
                _preload_content=False,
            )
        if (pv.get("status") or {}).get("phase") != "Bound":
            core.patch_persistent_volume_status(
                name, {"status": {"phase": "Bound"}}, _content_type=MERGE, _preload_content=False
            )
        if (claim.get("status") or {}).get("phase") != "Bound":
            core.patch_namespaced_persistent_volume_claim_status(
                claim["metadata"]["name"],
                namespace,
                {
                    "status": {
                        "phase": "Bound",
                        "accessModes": ["ReadWriteOnce"],
                        "capacity": {"storage": "10Gi"},
                    }
                },
                _content_type=MERGE,
                _preload_content=False,
            )


def _provision(api: ApiClient, namespace: str, nodes: Mapping[str, str]) -> None:
    """A zonal provisioner: a PV in the zone of the node kube-scheduler selected."""
    existing = volumes(api)
    for name, claim in claims_of(api, namespace).items():
        node = (claim["metadata"].get("annotations") or {}).get(SELECTED_NODE)
        pv = f"pvc-{namespace}-{name}"
        if node and node in nodes and not claim["spec"].get("volumeName") and pv not in existing:
            make_pv(
                api,
                pv,
                claim["spec"]["storageClassName"],
                zone=nodes[node],
                claim=(namespace, name),
            )


def _kubelet(api: ApiClient, namespace: str) -> None:
    """A kubelet's part: a bound pod runs and is Ready."""
    for name, pod in pods_of(api, namespace).items():
        if pod["spec"].get("nodeName") and not running(pod):
            status = {
                "phase": "Running",
                "conditions": [{"type": "Ready", "status": "True"}],
            }
            CoreV1Api(api).patch_namespaced_pod_status(
                name, namespace, {"status": status}, _content_type=MERGE, _preload_content=False
            )


@contextmanager
def cluster_running(
    api: ApiClient,
    namespace: str,
    *,
    zones_of: Mapping[str, str] | None = None,
    recreate: Callable[[str], Obj | None] | None = None,
    recreate_refused: bool = False,
) -> Iterator[Binder]:
    """The binder (gate mode, its own run loop) and the stand-ins, until the block ends."""
    stop = threading.Event()
    adapter = KubernetesAdapter(api, instance=f"e2e-{secrets.token_hex(2)}", request_timeout=15)
    config = BinderConfig(enforce="gate", namespace=namespace, recreate_refused=recreate_refused)
    binder = Binder(adapter, POLICY, config)
    errors: list[BaseException] = []

    def stand_ins() -> None:
        known: set[str] = set()
        while not stop.is_set():
            try:
                if zones_of is not None:
                    _provision(api, namespace, zones_of)
                _finish_bindings(api, namespace)
                _kubelet(api, namespace)
                present = set(pods_of(api, namespace))
                if recreate is not None:
                    for gone in known - present:
                        body = recreate(gone)
                        if body is not None:
                            create(api, namespace, body)
                            present.add(gone)
                known |= present
            except Exception as exc:  # a conflict with kube-scheduler's own write: go round
                errors.append(exc)
            stop.wait(0.2)

    threads = [
        threading.Thread(target=binder.run, args=(stop,), daemon=True, name="binder"),
        threading.Thread(target=stand_ins, daemon=True, name="stand-ins"),
    ]
    for thread in threads:
        thread.start()
    try:
        yield binder
    finally:
        stop.set()
        for thread in threads:
            thread.join(timeout=30)


# -- checks ----------------------------------------------------------------------------------


def pv_node(pv: Mapping[str, Any]) -> tuple[str, str]:
    """(label key, value) the PV's node affinity names."""
    expr = pv["spec"]["nodeAffinity"]["required"]["nodeSelectorTerms"][0]["matchExpressions"][0]
    return expr["key"], expr["values"][0]


def assert_placed_with_their_volumes(
    api: ApiClient, namespace: str, nodes: Mapping[str, Obj]
) -> None:
    pods, claims, pvs = pods_of(api, namespace), claims_of(api, namespace), volumes(api)
    by_shard: dict[str, list[Obj]] = {}
    for name, pod in pods.items():
        node = pod["spec"]["nodeName"]
        claim = claims[pod["spec"]["volumes"][0]["persistentVolumeClaim"]["claimName"]]
        key, value = pv_node(pvs[claim["spec"]["volumeName"]])
        assert nodes[node]["metadata"]["labels"][key] == value, (name, node, key, value)
        by_shard.setdefault(pod["metadata"]["labels"][POLICY.labels.shard], []).append(nodes[node])
    for members in by_shard.values():
        hosts = {n["metadata"]["labels"][HOST] for n in members}
        zones = {n["metadata"]["labels"][ZONE] for n in members}
        assert len(hosts) == len(members) and len(zones) == len(members)


def assert_no_false_events(api: ApiClient, namespace: str) -> None:
    """The binder says Pinned, never Scheduled, and nobody reports a pod unschedulable."""
    events = events_of(api, namespace)
    ours = [
        e
        for e in events
        if (e.get("source") or {}).get("component") == DEFAULT_COMPONENT
        or e.get("reportingComponent") == DEFAULT_COMPONENT
    ]
    assert not [e for e in ours if e["reason"] == "Scheduled"]
    assert {e["involvedObject"]["name"] for e in ours if e["reason"] == "Pinned"} == set(
        pods_of(api, namespace)
    )
    assert not [e for e in events if e["reason"] == "FailedScheduling"], [
        e["message"] for e in events if e["reason"] == "FailedScheduling"
    ]


def node_objects(api: ApiClient, names: list[str]) -> dict[str, Obj]:
    core = CoreV1Api(api)
    return {n: json_of(core.read_node(n, _preload_content=False)) for n in names}


# -- the tests -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("node_count", "pv_nodes", "shards"),
    [(9, 6, 3), (12, 9, 4)],
    ids=["9-nodes-6-pvs-3-shards", "12-nodes-9-pvs-4-shards"],
)
def test_statefulset_pods_run_on_nodes_holding_their_local_pvs(
    kube_api: ApiClient, namespace: str, run_id: str, node_count: int, pv_nodes: int, shards: int
) -> None:
    names = make_nodes(kube_api, run_id, node_count)
    storage_class = f"local-nvme-{run_id}"
    make_class(kube_api, storage_class, "kubernetes.io/no-provisioner")
    for node in names[:pv_nodes]:  # zones a, b, c alike: node i is in zone i mod 3
        make_pv(kube_api, f"pv-{node}", storage_class, node=node)
    for shard in range(shards):
        for index in range(2):
            name = f"redis-shard-{shard}-{index}"
            make_claim(kube_api, namespace, f"data-{name}", storage_class)
            create(kube_api, namespace, pod_body(name, shard, run_id, f"data-{name}"))
    started = time.monotonic()
    with cluster_running(kube_api, namespace):
        everything_runs = wait_for(
            lambda: all(running(p) for p in pods_of(kube_api, namespace).values()), timeout=60
        )
    took = time.monotonic() - started
    assert everything_runs, {n: p.get("status") for n, p in pods_of(kube_api, namespace).items()}
    assert took < 60
    assert_placed_with_their_volumes(kube_api, namespace, node_objects(kube_api, names))
    assert_no_false_events(kube_api, namespace)


def test_a_recreated_pod_goes_where_its_bound_pv_is(
    kube_api: ApiClient, namespace: str, run_id: str
) -> None:
    """A shard's replica recreated with its claim bound to a PV of zone c; the free PVs lean
    the other way (two in zone a), so only the bound PV's affinity brings it to zone c."""
    names = make_nodes(kube_api, run_id, 6)
    storage_class = f"local-nvme-{run_id}"
    make_class(kube_api, storage_class, "kubernetes.io/no-provisioner")
    target = names[5]  # zone c
    make_pv(
        kube_api,
        f"pv-{target}",
        storage_class,
        node=target,
        claim=(namespace, "data-redis-shard-0-1"),
    )
    make_claim(kube_api, namespace, "data-redis-shard-0-1", storage_class, volume=f"pv-{target}")
    make_pv(kube_api, f"pv-{names[0]}", storage_class, node=names[0])
    make_pv(kube_api, f"pv-{names[3]}", storage_class, node=names[3])
    make_claim(kube_api, namespace, "data-redis-shard-0-0", storage_class)
    for index in range(2):
        name = f"redis-shard-0-{index}"
        create(kube_api, namespace, pod_body(name, 0, run_id, f"data-{name}"))
    with cluster_running(kube_api, namespace):
        assert wait_for(
            lambda: all(running(p) for p in pods_of(kube_api, namespace).values()), timeout=60
        )
    pods = pods_of(kube_api, namespace)
    assert pods["redis-shard-0-1"]["spec"]["nodeName"] == target
    assert pods["redis-shard-0-0"]["spec"]["nodeName"] in {names[0], names[3]}
    assert_no_false_events(kube_api, namespace)


def test_a_provisioned_class_keeps_pods_in_its_allowed_zones(
    kube_api: ApiClient, namespace: str, run_id: str
) -> None:
    names = make_nodes(kube_api, run_id, 6)
    storage_class = f"zonal-{run_id}"
    make_class(kube_api, storage_class, PROVISIONER, zones=("zone-b", "zone-c"))
    for index in range(2):
        name = f"redis-shard-0-{index}"
        make_claim(kube_api, namespace, f"data-{name}", storage_class)
        create(kube_api, namespace, pod_body(name, 0, run_id, f"data-{name}"))
    nodes = node_objects(kube_api, names)
    zones = {n: o["metadata"]["labels"][ZONE] for n, o in nodes.items()}
    with cluster_running(kube_api, namespace, zones_of=zones):
        assert wait_for(
            lambda: all(running(p) for p in pods_of(kube_api, namespace).values()), timeout=60
        ), pods_of(kube_api, namespace)
    pods = pods_of(kube_api, namespace)
    assert {zones[p["spec"]["nodeName"]] for p in pods.values()} == {"zone-b", "zone-c"}
    claims = claims_of(kube_api, namespace)
    for name, pod in pods.items():
        selected = claims[f"data-{name}"]["metadata"]["annotations"][SELECTED_NODE]
        assert selected == pod["spec"]["nodeName"] == pinned_node(pod)
    assert_no_false_events(kube_api, namespace)


def test_a_pin_kube_scheduler_refuses_is_solved_again_and_runs_elsewhere(
    kube_api: ApiClient, namespace: str, run_id: str
) -> None:
    """kube-scheduler checks host ports, the binder does not: the emptier node, which the plan
    prefers, already has a pod on port 6379. kube-scheduler refuses that pin; the binder
    deletes the pod, its (stand-in) StatefulSet recreates it, and the new pin runs."""
    names = make_nodes(kube_api, run_id, 3)
    emptier, fuller = names[0], names[1]
    core = CoreV1Api(kube_api)
    for node, port, memory in ((emptier, 6379, "1Mi"), (fuller, 7000, "6Gi")):
        other: Obj = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": f"other-{node}", "labels": {"app": "other"}},
            "spec": {
                "nodeName": node,
                "containers": [
                    {
                        "name": "x",
                        "image": "busybox",
                        "ports": [{"containerPort": port, "hostPort": port}],
                        "resources": {"requests": {"cpu": "10m", "memory": memory}},
                    }
                ],
            },
        }
        json_of(core.create_namespaced_pod(namespace, other, _preload_content=False))  # type: ignore[arg-type]
    body = pod_body("redis-shard-0-0", 0, run_id, None, host_port=6379)
    body["spec"]["affinity"] = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {
                        "matchExpressions": [
                            {"key": HOST, "operator": "In", "values": [emptier, fuller]}
                        ]
                    }
                ]
            }
        }
    }
    create(kube_api, namespace, body)

    def again(name: str) -> Obj | None:
        return body if name == "redis-shard-0-0" else None

    with cluster_running(kube_api, namespace, recreate=again, recreate_refused=True):
        assert wait_for(
            lambda: running(pods_of(kube_api, namespace).get("redis-shard-0-0", {})), 60
        )
    pod = pods_of(kube_api, namespace)["redis-shard-0-0"]
    assert pod["spec"]["nodeName"] == fuller
    reasons = [
        e["reason"]
        for e in events_of(kube_api, namespace)
        if e["involvedObject"]["name"] == "redis-shard-0-0"
    ]
    assert "Repinning" in reasons and reasons.count("Pinned") == 2


def test_the_api_server_keeps_a_lifted_pin_where_it_is(
    kube_api: ApiClient, kube_adapter: KubernetesAdapter, namespace: str, run_id: str
) -> None:
    """Why a refused pin is not moved in place: once the gate is lifted, the API server
    refuses any change to the pod's node affinity (422 Invalid)."""
    from kubernetes.client.exceptions import ApiException

    names = make_nodes(kube_api, run_id, 2)
    body = pod_body("redis-shard-0-0", 0, run_id, None)
    body["spec"]["nodeSelector"] = {RUN_LABEL: f"{run_id}-nowhere"}  # kube-scheduler keeps off
    pod = create(kube_api, namespace, body)
    version = pod["metadata"]["resourceVersion"]
    pinned = kube_adapter.pin_and_ungate(
        namespace, "redis-shard-0-0", names[0], PLACEMENT_GATE, version
    )
    assert pinned.ok
    moved = {
        "spec": {
            "affinity": {
                "nodeAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": {
                        "nodeSelectorTerms": [
                            {
                                "matchFields": [
                                    {"key": "metadata.name", "operator": "In", "values": [names[1]]}
                                ]
                            }
                        ]
                    }
                }
            }
        }
    }
    with pytest.raises(ApiException) as refused:
        CoreV1Api(kube_api).patch_namespaced_pod(
            "redis-shard-0-0", namespace, moved, _content_type=MERGE, _preload_content=False
        )
    assert refused.value.status == 422
