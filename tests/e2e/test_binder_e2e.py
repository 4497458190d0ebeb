"""The binder end to end against a real kube-apiserver.

A Redis Cluster of 3 shards x 2 pods is placed in bind mode (Bindings through ``pods/binding``)
and in gate mode (pin by required node affinity, gate lifted, kube-scheduler binds), then read
back from the server and judged by the independent checker (``solver.check.audit``). A second
binder started on the placed cluster finds nothing to do, and of two leader-elected replicas
only the Lease holder places pods, the standby taking over once the leader stops.

Skipped unless KUBEBUILDER_ASSETS points at etcd and kube-apiserver binaries; the test that
waits for kube-scheduler to bind gated pods also needs kube-scheduler there. No kubelet and no
controller manager run: the StatefulSets below only carry the shard size (their replicas), and
the pods they own are created by the test with a controller reference, as their controller would.
"""

import re
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

import pytest
from kubernetes.client import ApiClient, AppsV1Api, CoreV1Api

from models.kube_objects import SHARD_SIZE_ANNOTATION, build_snapshot
from models.plan import Violation
from models.policy import Policy
from models.snapshot import Snapshot
from placer.binder.loop import PLACEMENT_GATE, Binder, BinderConfig, StepReport, pinned_node
from placer.kube.adapter import DEFAULT_COMPONENT, KubernetesAdapter
from placer.kube.leader import ApiLeaseClient, LeaderConfig, LeaderElector
from solver.check import audit
from tests.e2e.control_plane import ControlPlane, create_node, json_of

pytestmark = pytest.mark.e2e

POLICY = Policy()
CLUSTER = "cache"
SHARDS = 3
MEMBERS = 2
RUN_LABEL = "e2e-run"
"""On every Node of one test, and in its pods' nodeSelector: the session's API server also holds
the Nodes of other tests, and the binder (like kube-scheduler) sees every Node."""
ZONES = ("a", "b", "c")
RACKS_PER_ZONE = 2
ROLE_IN_EVENT = re.compile(r": (master|replica) of shard \S+;")

Enforce = Literal["bind", "gate"]
Pod = dict[str, Any]


# -- the objects, as plain dicts -------------------------------------------------------------


def cluster_nodes(run_id: str) -> dict[str, dict[str, str]]:
    """Six nodes, three zones of two racks with one node (host) each: name -> labels."""
    nodes: dict[str, dict[str, str]] = {}
    for zone in ZONES:
        for rack in range(RACKS_PER_ZONE):
            nodes[f"n-{run_id}-{zone}{rack}"] = {
                POLICY.topology.zone: f"zone-{zone}",
                POLICY.topology.rack: f"rack-{zone}{rack}",
                RUN_LABEL: run_id,
            }
    return nodes


def shard_labels(shard: int) -> dict[str, str]:
    return {
        **POLICY.selector,
        POLICY.labels.cluster: CLUSTER,
        POLICY.labels.shard: str(shard),
    }


def container() -> dict[str, Any]:
    return {
        "name": "redis",
        "image": "redis:7.2",
        "resources": {"requests": {"cpu": "250m", "memory": "512Mi"}},
    }


def statefulset_body(shard: int, replicas: int, run_id: str) -> dict[str, Any]:
    """One StatefulSet per shard, as in deploy/examples (a template has one shard label)."""
    labels = shard_labels(shard)
    return {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": {"name": f"{CLUSTER}-{shard}", "labels": labels},
        "spec": {
            "replicas": replicas,
            "serviceName": CLUSTER,
            "podManagementPolicy": "Parallel",
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "schedulerName": POLICY.scheduler_name,
                    "nodeSelector": {RUN_LABEL: run_id},
                    "containers": [container()],
                },
            },
        },
    }


def redis_pod_body(
    shard: int,
    index: int,
    run_id: str,
    *,
    enforce: Enforce,
    role: str | None = None,
    owner: Mapping[str, Any] | None = None,
    shard_size: int | None = None,
) -> Pod:
    """A pending member of ``shard``: for the binder by schedulerName (bind) or by the gate."""
    labels = shard_labels(shard)
    if role is not None:
        labels[POLICY.labels.role] = role
    metadata: dict[str, Any] = {"name": f"{CLUSTER}-{shard}-{index}", "labels": labels}
    if shard_size is not None:
        metadata["annotations"] = {SHARD_SIZE_ANNOTATION: str(shard_size)}
    if owner is not None:
        metadata["ownerReferences"] = [
            {
                "apiVersion": "apps/v1",
                "kind": "StatefulSet",
                "name": owner["metadata"]["name"],
                "uid": owner["metadata"]["uid"],
                "controller": True,
            }
        ]
    spec: dict[str, Any] = {
        "containers": [container()],
        "nodeSelector": {RUN_LABEL: run_id},
        "terminationGracePeriodSeconds": 0,
    }
    if enforce == "bind":
        spec["schedulerName"] = POLICY.scheduler_name
    else:
        spec["schedulingGates"] = [{"name": PLACEMENT_GATE}]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec}


def pin_terms(node: str) -> list[dict[str, Any]]:
    return [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}]


def required_terms(pod: Mapping[str, Any]) -> Any:
    affinity = (pod.get("spec") or {}).get("affinity") or {}
    required = (affinity.get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    ) or {}
    return required.get("nodeSelectorTerms")


def scheduled_events(events: Iterable[Mapping[str, Any]]) -> dict[str, list[Mapping[str, Any]]]:
    """The binder's Scheduled (bind mode) or Pinned (gate mode) events by pod name
    (kube-scheduler's own are left out)."""
    by_pod: dict[str, list[Mapping[str, Any]]] = defaultdict(list)
    for event in events:
        if (event.get("source") or {}).get("component") != DEFAULT_COMPONENT:
            continue
        if event.get("reason") in ("Scheduled", "Pinned"):  # bind mode, gate mode
            by_pod[event["involvedObject"]["name"]].append(event)
    return dict(by_pod)


def roles_from_events(scheduled: Mapping[str, list[Mapping[str, Any]]]) -> dict[str, str]:
    """The role the solver gave each pod, as its Scheduled event says ("master of shard ...")."""
    roles: dict[str, str] = {}
    for name, events in scheduled.items():
        (event,) = events
        match = ROLE_IN_EVENT.search(str(event.get("message", "")))
        assert match, event.get("message")
        roles[name] = match.group(1)
    return roles


def audit_placement(
    nodes: list[dict[str, Any]],
    pods: Iterable[Pod],
    statefulsets: list[dict[str, Any]],
    placement: Mapping[str, str] | None = None,
    roles: Mapping[str, str] | None = None,
) -> tuple[Snapshot, list[Violation]]:
    """The cluster as read back, judged by the independent checker.

    ``placement`` puts pinned pods on their node (in gate mode, before kube-scheduler binds
    them) and ``roles`` labels pods whose role the solver chose, so the checker sees the
    placement and the roles the binder decided.
    """
    objects: list[Mapping[str, Any]] = [*nodes, *statefulsets]
    for pod in pods:
        name = pod["metadata"]["name"]
        spec = dict(pod["spec"])
        metadata = dict(pod["metadata"])
        if placement and name in placement:
            spec["nodeName"] = placement[name]
        if roles and name in roles:
            metadata["labels"] = {**metadata["labels"], POLICY.labels.role: roles[name]}
        objects.append({**pod, "metadata": metadata, "spec": spec})
    snapshot = build_snapshot(objects, POLICY)
    return snapshot, audit(snapshot, POLICY)


def assert_sound(snapshot: Snapshot, violations: list[Violation], nodes: Iterable[str]) -> None:
    assert snapshot.issues == (), snapshot.issues
    assert len(snapshot.members) == SHARDS * MEMBERS
    assert not snapshot.pending
    assert {m.pod.node_name for m in snapshot.members} <= set(nodes)
    for shard, members in snapshot.shards.items():
        assert sorted(m.role.value for m in members if m.role) == ["master", "replica"], shard
    hard = [v for v in violations if v.severity == "hard"]
    assert hard == [], hard


def step_until(binder: Binder, done: Callable[[], bool], max_steps: int = 20) -> list[StepReport]:
    """Step on a clock that jumps to the wake-up each step asks for (the batch window)."""
    now = time.time()
    reports: list[StepReport] = []
    for _ in range(max_steps):
        reports.append(binder.step(now=now))
        if done():
            return reports
        now += max(reports[-1].next_step_in, 0.1)
    pytest.fail(f"not done after {max_steps} steps: {reports}")


def wait_for(check: Callable[[], bool], timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(0.2)
    return check()


# -- the API server --------------------------------------------------------------------------


def create_nodes(api: ApiClient, run_id: str) -> list[str]:
    """The Ready nodes of ``cluster_nodes``, allocatable set and the not-ready taint removed."""
    nodes = cluster_nodes(run_id)
    for name, labels in nodes.items():
        create_node(api, name, labels, cpu="4", memory="8Gi")  # hostname label = name
    return list(nodes)


def create_statefulset(
    api: ApiClient, namespace: str, shard: int, replicas: int, run_id: str
) -> dict[str, Any]:
    resp = AppsV1Api(api).create_namespaced_stateful_set(
        namespace,
        statefulset_body(shard, replicas, run_id),  # type: ignore[arg-type]
        _preload_content=False,
    )
    return json_of(resp)


def create_pod(api: ApiClient, namespace: str, body: Pod) -> Pod:
    resp = CoreV1Api(api).create_namespaced_pod(
        namespace,
        body,  # type: ignore[arg-type]
        _preload_content=False,
    )
    return json_of(resp)


def read_pods(api: ApiClient, namespace: str) -> dict[str, Pod]:
    items = json_of(CoreV1Api(api).list_namespaced_pod(namespace, _preload_content=False))["items"]
    return {p["metadata"]["name"]: p for p in items}


def read_events(api: ApiClient, namespace: str) -> list[dict[str, Any]]:
    resp = CoreV1Api(api).list_namespaced_event(namespace, _preload_content=False)
    items: list[dict[str, Any]] = json_of(resp)["items"]
    return items


def create_cluster(api: ApiClient, namespace: str, run_id: str, enforce: Enforce) -> list[str]:
    """Nodes and the 6 pending pods.

    bind: shard size from the owning StatefulSet, roles labelled (one master per shard).
    gate: shard size from the annotation, no role label (the solver picks the master).
    """
    nodes = create_nodes(api, run_id)
    for shard in range(SHARDS):
        if enforce == "bind":
            owner = create_statefulset(api, namespace, shard, MEMBERS, run_id)
            for index in range(MEMBERS):
                role = "master" if index == 0 else "replica"
                body = redis_pod_body(shard, index, run_id, enforce=enforce, role=role, owner=owner)
                create_pod(api, namespace, body)
        else:
            for index in range(MEMBERS):
                body = redis_pod_body(shard, index, run_id, enforce=enforce, shard_size=MEMBERS)
                create_pod(api, namespace, body)
    return nodes


def placed(api: ApiClient, namespace: str, enforce: Enforce) -> bool:
    """bind: every pod has a node. gate: every pod is ungated and pinned to one node."""
    pods = list(read_pods(api, namespace).values())
    if len(pods) != SHARDS * MEMBERS:
        return False
    if enforce == "bind":
        return all(p["spec"].get("nodeName") for p in pods)
    return all(not p["spec"].get("schedulingGates") and pinned_node(p) for p in pods)


def binder_for(api: ApiClient, namespace: str, enforce: Enforce, instance: str) -> Binder:
    adapter = KubernetesAdapter(api, instance=instance, request_timeout=15)
    return Binder(adapter, POLICY, BinderConfig(enforce=enforce, namespace=namespace))


def place(api: ApiClient, namespace: str, run_id: str, enforce: Enforce) -> list[str]:
    """Create the cluster and step one binder until it has placed every pod; the node names."""
    nodes = create_cluster(api, namespace, run_id, enforce)
    binder = binder_for(api, namespace, enforce, "e2e-binder")
    reports = step_until(binder, lambda: placed(api, namespace, enforce))
    assert sum(len(r.bound) for r in reports) == SHARDS * MEMBERS, reports
    assert not any(r.failed or r.unplaced for r in reports), reports
    return nodes


# -- bind mode -------------------------------------------------------------------------------


def test_bind_mode_places_the_cluster_soundly(
    kube_api: ApiClient, kube_adapter: KubernetesAdapter, namespace: str, run_id: str
) -> None:
    nodes = place(kube_api, namespace, run_id, "bind")
    pods = read_pods(kube_api, namespace)
    assert len(pods) == SHARDS * MEMBERS
    assert all(p["spec"]["nodeName"] in nodes for p in pods.values())

    snapshot, violations = audit_placement(
        kube_adapter.list_nodes(label_selector=f"{RUN_LABEL}={run_id}"),
        kube_adapter.list_pods(namespace),
        kube_adapter.list_statefulsets(namespace),
    )
    assert_sound(snapshot, violations, nodes)
    assert {m.shard_size for m in snapshot.members} == {MEMBERS}  # from the StatefulSets

    scheduled = scheduled_events(read_events(kube_api, namespace))
    assert sorted(scheduled) == sorted(pods)
    for name, events in scheduled.items():
        (event,) = events
        node = pods[name]["spec"]["nodeName"]
        assert event["type"] == "Normal"
        assert f"Successfully assigned {namespace}/{name} to {node}:" in event["message"]
        assert event["involvedObject"]["uid"] == pods[name]["metadata"]["uid"]


def test_a_shard_waits_for_the_members_its_statefulset_promises(
    kube_api: ApiClient, namespace: str, run_id: str
) -> None:
    create_nodes(kube_api, run_id)
    owner = create_statefulset(kube_api, namespace, 0, 3, run_id)
    for index in range(2):
        body = redis_pod_body(0, index, run_id, enforce="bind", owner=owner)
        create_pod(kube_api, namespace, body)
    binder = binder_for(kube_api, namespace, "bind", "e2e-binder")
    now = time.time()
    for later in (0.0, 5.0):
        report = binder.step(now=now + later)
        (decision,) = report.decisions
        assert (decision.shard, decision.decision) == (f"{namespace}/{CLUSTER}/0", "wait")
        assert "2 of 3 members present" in decision.reason
        assert report.bound == [] and report.solved_pods == 0
    assert not any(p["spec"].get("nodeName") for p in read_pods(kube_api, namespace).values())
    waiting = [e for e in read_events(kube_api, namespace) if e["reason"] == "WaitingForShard"]
    # announced once per pod, not once per step
    assert sorted(e["involvedObject"]["name"] for e in waiting) == [
        f"{CLUSTER}-0-0",
        f"{CLUSTER}-0-1",
    ]


# -- gate mode -------------------------------------------------------------------------------


def test_gate_mode_pins_and_ungates_the_cluster_soundly(
    kube_api: ApiClient, kube_adapter: KubernetesAdapter, namespace: str, run_id: str
) -> None:
    nodes = place(kube_api, namespace, run_id, "gate")
    pods = read_pods(kube_api, namespace)
    assert len(pods) == SHARDS * MEMBERS
    pins: dict[str, str] = {}
    for name, pod in pods.items():
        assert not pod["spec"].get("schedulingGates"), name
        node = pinned_node(pod)
        assert node in nodes, (name, node)
        assert required_terms(pod) == pin_terms(node), name
        assert pod["spec"]["nodeSelector"] == {RUN_LABEL: run_id}  # untouched by the pin
        pins[name] = node

    scheduled = scheduled_events(read_events(kube_api, namespace))
    assert sorted(scheduled) == sorted(pods)
    for name, events in scheduled.items():
        (event,) = events
        assert event["reason"] == "Pinned"  # Scheduled is kube-scheduler's, when it binds
        assert f"Pinned {namespace}/{name} to {pins[name]} as " in event["message"]
    roles = roles_from_events(scheduled)
    labelled = {
        name: pod["metadata"]["labels"].get(POLICY.labels.role) for name, pod in pods.items()
    }
    assert labelled == roles  # written in the pin's own patch
    snapshot, violations = audit_placement(
        kube_adapter.list_nodes(label_selector=f"{RUN_LABEL}={run_id}"),
        kube_adapter.list_pods(namespace),
        kube_adapter.list_statefulsets(namespace),
        placement=pins,
        roles=roles,
    )
    assert_sound(snapshot, violations, nodes)


def test_kube_scheduler_binds_gated_pods_to_their_pinned_nodes(
    control_plane: ControlPlane, kube_api: ApiClient, namespace: str, run_id: str
) -> None:
    if not control_plane.scheduler_running:
        pytest.skip(
            "kube-scheduler is not in KUBEBUILDER_ASSETS: nothing binds the ungated pods "
            "(the pin itself is tested without it)"
        )
    place(kube_api, namespace, run_id, "gate")
    pins = {name: pinned_node(p) for name, p in read_pods(kube_api, namespace).items()}
    assert None not in pins.values()

    def bound() -> dict[str, str | None]:
        return {n: p["spec"].get("nodeName") for n, p in read_pods(kube_api, namespace).items()}

    assert wait_for(lambda: bound() == pins, timeout=60), (bound(), pins)


# -- restart ---------------------------------------------------------------------------------


@pytest.mark.parametrize("enforce", ["bind", "gate"])
def test_a_restarted_binder_finds_nothing_to_do(
    enforce: Enforce, kube_api: ApiClient, namespace: str, run_id: str
) -> None:
    place(kube_api, namespace, run_id, enforce)
    before = read_pods(kube_api, namespace)

    binder = binder_for(kube_api, namespace, enforce, "e2e-restarted")
    now = time.time()
    for later in (0.0, 2.0, 4.0):  # past the batch window, had anything been pending
        report = binder.step(now=now + later)
        assert report.decisions == [], report
        assert (report.bound, report.failed, report.unplaced) == ([], [], []), report
        assert report.solved_pods == 0 and report.solve_status is None, report

    after = read_pods(kube_api, namespace)
    if enforce == "bind":
        # not a single write: every pod is at the resourceVersion it had
        assert {n: p["metadata"]["resourceVersion"] for n, p in after.items()} == {
            n: p["metadata"]["resourceVersion"] for n, p in before.items()
        }
    else:
        # kube-scheduler (if running) may bind meanwhile, but no pin moves and no gate returns
        assert {n: pinned_node(p) for n, p in after.items()} == {
            n: pinned_node(p) for n, p in before.items()
        }
        assert not any(p["spec"].get("schedulingGates") for p in after.values())
    mine = [
        e for e in read_events(kube_api, namespace) if e.get("reportingInstance") == "e2e-restarted"
    ]
    assert mine == []
    registry = binder.metrics.registry
    assert registry.get_sample_value("redis_placer_pending_pods") == 0
    assert registry.get_sample_value("redis_placer_binds_total", {"result": "bound"}) == 0


# -- two replicas, one Lease -----------------------------------------------------------------


@dataclass
class Replica:
    """One binder process as deploy/ runs it: the decision loop, led by a Lease elector."""

    name: str
    client: ApiClient
    binder: Binder
    elector: LeaderElector
    stop_event: threading.Event = field(default_factory=threading.Event)
    reports: list[StepReport] = field(default_factory=list)
    errors: list[BaseException] = field(default_factory=list)
    threads: list[threading.Thread] = field(default_factory=list)
    stopped: bool = False

    @classmethod
    def start(
        cls, control_plane: ControlPlane, namespace: str, name: str, config: LeaderConfig
    ) -> "Replica":
        client = control_plane.api_client()
        adapter = KubernetesAdapter(client, instance=name, request_timeout=15)
        replica = cls(
            name=name,
            client=client,
            binder=Binder(adapter, POLICY, BinderConfig(namespace=namespace)),
            elector=LeaderElector(
                ApiLeaseClient(client, namespace, "redis-placer-binder"), name, config
            ),
        )
        replica._spawn("lease", replica.elector.run, lambda: None, lambda: None, replica.stop_event)
        replica._spawn(
            "binder",
            replica.binder.run,
            replica.stop_event,
            leading=lambda: replica.elector.is_leader,
            on_step=replica.reports.append,
        )
        return replica

    def _spawn(self, what: str, target: Callable[..., None], *args: Any, **kwargs: Any) -> None:
        def guarded() -> None:
            try:
                target(*args, **kwargs)
            except BaseException as exc:
                self.errors.append(exc)
                raise

        thread = threading.Thread(target=guarded, name=f"{self.name}-{what}", daemon=True)
        self.threads.append(thread)
        thread.start()

    @property
    def bound(self) -> list[tuple[str, str]]:
        return [b for r in self.reports for b in r.bound]

    def stop(self) -> None:
        """Like SIGTERM: the elector releases the Lease, the loop ends after its current wait."""
        if self.stopped:
            return
        self.stopped = True
        self.stop_event.set()
        for thread in self.threads:
            thread.join(timeout=45)
        self.client.close()


def test_only_the_lease_holder_places_and_the_standby_takes_over(
    control_plane: ControlPlane,
    kube_api: ApiClient,
    namespace: str,
    run_id: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # An idle Binder.run sleeps up to IDLE_SECONDS between steps (a watch wakes it only when the
    # watch call ends); a short idle keeps this test quick. The deadlines below hold without it.
    monkeypatch.setattr("placer.binder.loop.IDLE_SECONDS", 1.0)
    create_nodes(kube_api, run_id)
    config = LeaderConfig(lease_duration=3, renew_deadline=2, retry_period=0.2)
    replicas = [
        Replica.start(control_plane, namespace, n, config) for n in ("binder-a", "binder-b")
    ]

    def shard_pods(shard: int) -> dict[str, Pod]:
        prefix = f"{CLUSTER}-{shard}-"
        return {n: p for n, p in read_pods(kube_api, namespace).items() if n.startswith(prefix)}

    def create_shard(shard: int) -> None:
        for index, role in enumerate(("master", "replica")):
            body = redis_pod_body(
                shard, index, run_id, enforce="bind", role=role, shard_size=MEMBERS
            )
            create_pod(kube_api, namespace, body)

    def shard_bound(shard: int) -> bool:
        pods = shard_pods(shard)
        return len(pods) == MEMBERS and all(p["spec"].get("nodeName") for p in pods.values())

    def reporters(shard: int) -> list[str]:
        names = set(shard_pods(shard))
        events = scheduled_events(read_events(kube_api, namespace))
        return sorted(e["reportingInstance"] for n in names for e in events.get(n, []))

    try:
        assert wait_for(lambda: sum(r.elector.is_leader for r in replicas) == 1, timeout=15)
        leader, standby = sorted(replicas, key=lambda r: not r.elector.is_leader)

        create_shard(0)
        assert wait_for(lambda: shard_bound(0), timeout=90), (leader.errors, leader.reports)
        # Bindings go out beside the loop: their outcome is in the step after they land.
        assert wait_for(lambda: len(leader.bound) == MEMBERS, timeout=10), leader.reports
        assert standby.reports == [], "the standby must not step while another holds the Lease"
        assert reporters(0) == [leader.name] * MEMBERS

        leader.stop()
        assert not leader.elector.is_leader
        assert wait_for(lambda: standby.elector.is_leader, timeout=15)
        create_shard(1)
        assert wait_for(lambda: shard_bound(1), timeout=90), (standby.errors, standby.reports)
        assert wait_for(lambda: len(standby.bound) == MEMBERS, timeout=10), standby.reports
        assert reporters(1) == [standby.name] * MEMBERS
        assert reporters(0) == [leader.name] * MEMBERS  # nothing bound twice
        assert leader.errors == [] and standby.errors == []
    finally:
        for replica in replicas:
            replica.stop()
