"""The binder enforcing its plans against the in-memory API server.

Gate mode, a restart in the middle of a batch, another actor binding our pods, pods deleted
between the solve and the bind, partial failures with backoff, unreadable input, metrics and
events. The fake refuses a second bind (409 naming the node), checks uid preconditions and
resourceVersion-guarded pins, so what passes here is what a real API server would accept.
"""

import copy
from collections import Counter
from collections.abc import Callable, Mapping
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from models.kube_objects import build_snapshot, flatten
from models.plan import Plan, Violation
from models.policy import Policy
from models.snapshot import Snapshot
from models.synthetic import generate_cluster
from placer.binder.cache import PodKey, pod_key_of
from placer.binder.loop import PLACEMENT_GATE, Binder, BinderConfig, StepReport, pinned_node
from placer.kube.adapter import BindOutcome, BindResult, PatchResult
from placer.kube.fake import FakeKubeAdapter
from placer.metrics import Metrics
from solver.check import audit, check_plan
from tests.kube_dicts import node, redis_pod

T0 = 1000.0
Annotations = Mapping[str, str] | None
SHARD_SIZE = "redis-placer.io/shard-size"
GREEDY = BinderConfig(solver="greedy")


# -- building clusters -----------------------------------------------------------------------


def _nodes(count: int, zones: int = 3, memory: str = "16Gi") -> list[dict[str, Any]]:
    """``count`` nodes spread over ``zones`` zones, one rack per node."""
    return [
        node(f"n{i}", f"z{i % zones}", f"z{i % zones}-r{i // zones}", memory=memory)
        for i in range(count)
    ]


def _shard(
    shard: int,
    size: int = 3,
    *,
    gated: bool = False,
    roles: bool = True,
    memory: str = "1Gi",
    annotate: bool = False,
    cluster: str = "c",
) -> list[dict[str, Any]]:
    """One shard's pending pods: ``<cluster>-<shard>-0`` is the master when roles are labelled.

    Gated pods carry the placement gate and leave scheduling to the default scheduler, as in
    gate mode; the others name the policy's scheduler, as in bind mode.
    """
    extra: dict[str, Any] = (
        {"schedulerName": "default-scheduler", "schedulingGates": [{"name": PLACEMENT_GATE}]}
        if gated
        else {"schedulerName": "redis-placer"}
    )
    if annotate:
        extra["annotations"] = {SHARD_SIZE: str(size)}
    return [
        redis_pod(
            f"{cluster}-{shard}-{i}",
            cluster,
            shard,
            ("master" if i == 0 else "replica") if roles else None,
            memory=memory,
            **copy.deepcopy(extra),
        )
        for i in range(size)
    ]


def _synthetic(nodes: int, shards: int) -> FakeKubeAdapter:
    """A generated cluster (mixed node sizes, some unrelated load) with pending shards only."""
    objs = flatten([generate_cluster(nodes, shards)])
    return FakeKubeAdapter(
        nodes=[o for o in objs if o["kind"] == "Node"],
        pods=[o for o in objs if o["kind"] == "Pod"],
    )


def _key(name: str) -> PodKey:
    namespace, _, pod = name.partition("/")
    return (namespace, pod)


def _shard_of(name: str) -> str:
    """``default/c-1-2`` -> ``default/c/1``: the binder's retry key for that pod's shard."""
    namespace, pod = _key(name)
    cluster, shard, _ = pod.rsplit("-", 2)
    return f"{namespace}/{cluster}/{shard}"


# -- driving the binder ----------------------------------------------------------------------


def _batch(binder: Binder, now: float) -> StepReport:
    """Open the batch window at ``now`` and solve it 1.5 s later (the default window is 1 s);
    in gate mode a batch goes at once when kube-scheduler holds no pin it is still to bind."""
    opened = binder.step(now=now)
    if binder.config.enforce == "gate" and opened.solve_status is not None:
        return opened
    assert opened.solve_status is None and opened.bound == []
    return binder.step(now=now + 1.5)


def _record_solves(
    binder: Binder,
    monkeypatch: pytest.MonkeyPatch,
    after: Callable[[Plan], None] | None = None,
) -> list[tuple[Snapshot, Plan]]:
    """Keep every (batch, plan) the binder solves; ``after`` runs between solve and enforce."""
    solves: list[tuple[Snapshot, Plan]] = []
    solve = binder._solve

    def recording(snapshot: Snapshot) -> Plan:
        plan = solve(snapshot)
        solves.append((snapshot, plan))
        if after is not None:
            after(plan)
        return plan

    monkeypatch.setattr(binder, "_solve", recording)
    return solves


def _record_binds(fake: FakeKubeAdapter, monkeypatch: pytest.MonkeyPatch) -> list[PodKey]:
    """Every bind the binder attempts, accepted or not (``fake.binds`` holds accepted ones)."""
    attempts: list[PodKey] = []
    bind = fake.bind_pod

    def recording(
        namespace: str, name: str, uid: str | None, target: str, annotations: Annotations = None
    ) -> BindResult:
        attempts.append((namespace, name))
        return bind(namespace, name, uid, target, annotations)

    monkeypatch.setattr(fake, "bind_pod", recording)
    return attempts


def _placements(plan: Plan) -> dict[str, str]:
    return {a.pod: a.node for a in plan.assignments if a.action == "place" and a.node}


# -- reading the cluster back ----------------------------------------------------------------


def _binds_per_pod(fake: FakeKubeAdapter) -> Counter[PodKey]:
    return Counter(key for key, _ in fake.binds)


def _node_of(fake: FakeKubeAdapter, name: str) -> str | None:
    node_name: str | None = fake.pods[_key(name)]["spec"].get("nodeName")
    return node_name


def _hard_violations(fake: FakeKubeAdapter, policy: Policy) -> list[Violation]:
    """Hard rules the cluster as the server holds it breaks, by the independent checker."""
    cluster = build_snapshot([*fake.list_nodes(), *fake.list_pods()], policy)
    return [v for v in audit(cluster, policy) if v.severity == "hard"]


def _events(fake: FakeKubeAdapter, reason: str, pod: str | None = None) -> list[dict[str, Any]]:
    return [
        e
        for e in fake.events
        if e["reason"] == reason
        and (
            pod is None
            or _key(pod) == (e["involvedObject"]["namespace"], e["involvedObject"]["name"])
        )
    ]


def _sample(binder: Binder, name: str, **labels: str) -> float | None:
    value: float | None = binder.metrics.registry.get_sample_value(name, labels)
    return value


def _pin_writes(fake: FakeKubeAdapter) -> Counter[PodKey]:
    """Server-side writes that pinned a pod to a node (or re-pinned it elsewhere), per pod."""
    pins: Counter[PodKey] = Counter()
    last: dict[PodKey, str | None] = {}
    for _, event in fake.log:
        key = pod_key_of(event.object)
        pinned = pinned_node(event.object)
        if event.type == "MODIFIED" and pinned is not None and pinned != last.get(key):
            pins[key] += 1
        last[key] = pinned
    return pins


def _server_update(
    fake: FakeKubeAdapter, name: str, change: Callable[[dict[str, Any]], None]
) -> None:
    """Change a pod as another client would: a new resourceVersion and a MODIFIED event."""
    key = _key(name)
    with fake._lock:
        pod = copy.deepcopy(fake.pods[key])
        change(pod)
        fake._update(key, pod)


def _kube_scheduler_binds_pinned(fake: FakeKubeAdapter) -> int:
    """What kube-scheduler does with an ungated pod pinned to one node: bind it there."""
    bound = 0
    for (namespace, name), pod in sorted(fake.pods.items()):
        target = pinned_node(pod)
        spec = pod["spec"]
        if target and not spec.get("nodeName") and not spec.get("schedulingGates"):
            assert fake.bind_pod(namespace, name, pod["metadata"]["uid"], target).ok
            bound += 1
    return bound


# -- 1. gate mode ----------------------------------------------------------------------------


def test_gate_mode_pins_and_ungates_in_one_patch_and_posts_no_binding() -> None:
    """Gate mode leaves binding to kube-scheduler: one write per pod, pin and ungate together."""
    fake = FakeKubeAdapter(nodes=_nodes(6), pods=[*_shard(0, gated=True), *_shard(1, gated=True)])
    policy = Policy()
    binder = Binder(fake, policy, BinderConfig(enforce="gate"))
    report = _batch(binder, T0)
    assert report.solve_status == "OPTIMAL" and report.failed == []
    assert len(report.bound) == 6
    assert fake.binds == []
    for name, target in report.bound:
        spec = fake.pods[_key(name)]["spec"]
        assert "schedulingGates" not in spec and "nodeName" not in spec
        assert spec["schedulerName"] == "default-scheduler"
        required = spec["affinity"]["nodeAffinity"][
            "requiredDuringSchedulingIgnoredDuringExecution"
        ]
        assert required == {
            "nodeSelectorTerms": [
                {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [target]}]}
            ]
        }
    assert _pin_writes(fake) == Counter({key: 1 for key in fake.pods})
    assert sum(1 for _, e in fake.log if e.type == "MODIFIED") == 6  # nothing else was written
    masters = [n for name, n in report.bound if name.endswith("-0")]
    assert len(set(masters)) == 2
    assert _sample(binder, "redis_placer_binds_total", result="bound") == 6
    assert _sample(binder, "redis_placer_solves_total", status="OPTIMAL") == 1
    assert _sample(binder, "redis_placer_gated_pods") == 6

    binder.cache.poll(0)
    again = binder.step(now=T0 + 3)
    assert again.decisions == [] and again.bound == []
    assert _sample(binder, "redis_placer_pending_pods") == 0
    assert _pin_writes(fake) == Counter({key: 1 for key in fake.pods})
    assert _kube_scheduler_binds_pinned(fake) == 6
    assert _hard_violations(fake, policy) == []


def test_gate_mode_counts_pinned_unbound_pods_against_node_capacity() -> None:
    """A pinned pod kube-scheduler has not bound yet still holds its room for the next batch."""
    fake = FakeKubeAdapter(
        nodes=_nodes(3, memory="2Gi"), pods=_shard(0, gated=True, memory="1536Mi")
    )
    binder = Binder(fake, Policy(), BinderConfig(enforce="gate"))
    first = _batch(binder, T0)
    assert sorted(n for _, n in first.bound) == ["n0", "n1", "n2"]
    for pod in _shard(1, gated=True, memory="1536Mi"):
        fake.add_pod(pod)
    binder.cache.poll(0)
    second = _batch(binder, T0 + 10)
    assert second.bound == []
    assert sorted(name for name, _ in second.unplaced) == [
        "default/c-1-0",
        "default/c-1-1",
        "default/c-1-2",
    ]
    assert all("insufficient memory" in reason for _, reason in second.unplaced)
    for i in range(3):
        spec = fake.pods[("default", f"c-1-{i}")]["spec"]
        assert spec["schedulingGates"] == [{"name": PLACEMENT_GATE}] and "affinity" not in spec
    assert len(_events(fake, "FailedScheduling")) == 3


def test_gate_mode_counts_a_pinned_master_against_master_exclusivity() -> None:
    """Two nodes, one already holding a pinned master: only one of two new shards fits."""
    fake = FakeKubeAdapter(nodes=_nodes(2, zones=2), pods=_shard(0, size=2, gated=True))
    binder = Binder(fake, Policy(), BinderConfig(enforce="gate"))
    first = dict(_batch(binder, T0).bound)
    pinned_master = first["default/c-0-0"]
    for shard in (1, 2):
        for pod in _shard(shard, size=2, gated=True):
            fake.add_pod(pod)
    binder.cache.poll(0)
    second = _batch(binder, T0 + 10)
    placed = dict(second.bound)
    assert len(placed) == 2 and len(second.unplaced) == 2
    (master,) = [name for name in placed if name.endswith("-0")]
    assert placed[master] != pinned_master
    placed_shards = {_shard_of(name) for name in placed}
    held_shards = {_shard_of(name) for name, _ in second.unplaced}
    assert len(placed_shards) == len(held_shards) == 1
    assert placed_shards | held_shards == {"default/c/1", "default/c/2"}


def test_gate_mode_counts_a_pinned_pod_still_held_by_another_gate() -> None:
    """Our patch lifts only our gate; a pod also held by e.g. a quota gate is still ours there."""
    held = _shard(0, size=1, gated=True, memory="1536Mi")
    held[0]["spec"]["schedulingGates"].append({"name": "quota.example.com/admission"})
    fake = FakeKubeAdapter(nodes=_nodes(1, memory="2Gi"), pods=held)
    binder = Binder(fake, Policy(), BinderConfig(enforce="gate"))
    assert _batch(binder, T0).bound == [("default/c-0-0", "n0")]
    assert fake.pods[("default", "c-0-0")]["spec"]["schedulingGates"] == [
        {"name": "quota.example.com/admission"}
    ]
    for pod in _shard(1, size=1, gated=True, memory="1536Mi"):
        fake.add_pod(pod)
    binder.cache.poll(0)
    second = _batch(binder, T0 + 10)
    assert second.bound == [], "n0's room was given to a second pod"


def test_gate_mode_ignores_pending_pods_without_the_gate() -> None:
    """Without our gate a pod belongs to another scheduler (or to bind mode): never touched."""
    default = _shard(0)
    for pod in default:
        pod["spec"]["schedulerName"] = "default-scheduler"
    fake = FakeKubeAdapter(nodes=_nodes(9), pods=[*default, *_shard(1), *_shard(2, gated=True)])
    versions = {k: p["metadata"]["resourceVersion"] for k, p in fake.pods.items()}
    binder = Binder(fake, Policy(), BinderConfig(enforce="gate"))
    report = _batch(binder, T0)
    assert [d.shard for d in report.decisions] == ["default/c/2"]
    assert sorted(name for name, _ in report.bound) == [f"default/c-2-{i}" for i in range(3)]
    assert _sample(binder, "redis_placer_pending_pods") == 3
    for key, version in versions.items():
        if key[1].startswith(("c-0-", "c-1-")):
            pod = fake.pods[key]
            assert pod["metadata"]["resourceVersion"] == version and "affinity" not in pod["spec"]
    touched = {e["involvedObject"]["name"] for e in fake.events}
    assert touched == {f"c-2-{i}" for i in range(3)}
    assert fake.binds == []


def test_bind_mode_ignores_gated_pods_until_the_gate_is_lifted(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A gated pod cannot be bound (the server refuses); bind mode waits until it is ungated."""
    gated = _shard(0)
    for pod in gated:
        pod["spec"]["schedulingGates"] = [{"name": PLACEMENT_GATE}]
    fake = FakeKubeAdapter(nodes=_nodes(6), pods=[*gated, *_shard(1)])
    attempts = _record_binds(fake, monkeypatch)
    binder = Binder(fake, Policy(), GREEDY)
    report = _batch(binder, T0)
    assert sorted(name for name, _ in report.bound) == [f"default/c-1-{i}" for i in range(3)]
    assert all(key[1].startswith("c-1-") for key in attempts)
    assert {e["involvedObject"]["name"] for e in fake.events} == {f"c-1-{i}" for i in range(3)}
    assert _sample(binder, "redis_placer_pending_pods") == 3

    for i in range(3):
        _server_update(fake, f"default/c-0-{i}", lambda p: p["spec"].pop("schedulingGates"))
    binder.cache.poll(0)
    lifted = _batch(binder, T0 + 10)
    assert sorted(name for name, _ in lifted.bound) == [f"default/c-0-{i}" for i in range(3)]
    assert set(_binds_per_pod(fake).values()) == {1} and len(fake.binds) == 6
    assert _hard_violations(fake, Policy()) == []


def test_gate_mode_stale_resource_version_conflicts_and_is_pinned_on_retry(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A pod changed after the read is not pinned from stale terms; it is re-read and retried."""
    fake = FakeKubeAdapter(nodes=_nodes(6), pods=_shard(0, gated=True))
    binder = Binder(fake, Policy(), BinderConfig(enforce="gate", solver="greedy"))

    def touch_one(_: Plan) -> None:
        if not fake.pods[("default", "c-0-1")]["metadata"]["labels"].get("touched"):
            fake.patch_pod_labels("default", "c-0-1", {"touched": "yes"})

    _record_solves(binder, monkeypatch, after=touch_one)
    report = _batch(binder, T0)
    assert [name for name, _ in report.failed] == ["default/c-0-1"]
    assert report.failed[0][1].startswith("conflict")
    # c-0-0 was pinned before the conflict; c-0-2 waits for the re-solve.
    assert len(report.bound) == 1 and report.next_step_in == 0.0
    assert binder._retry == {"default/c/0": (1, T0)}  # solved at once: nothing was pinned
    stored = fake.pods[("default", "c-0-1")]
    assert stored["spec"]["schedulingGates"] == [{"name": PLACEMENT_GATE}]
    cached = binder.cache.pods[("default", "c-0-1")]
    assert cached["metadata"]["resourceVersion"] == stored["metadata"]["resourceVersion"]
    assert _sample(binder, "redis_placer_binds_total", result="conflict") == 1
    assert _sample(binder, "redis_placer_bind_errors_total", reason="http_409") == 1

    retry = _batch(binder, T0 + 1.5)
    assert sorted(name for name, _ in retry.bound) == ["default/c-0-1", "default/c-0-2"]
    assert binder._retry == {}
    assert fake.pods[("default", "c-0-1")]["metadata"]["labels"]["touched"] == "yes"
    assert _pin_writes(fake) == Counter({key: 1 for key in fake.pods})
    assert len({pinned_node(p) for p in fake.pods.values()}) == 3
    assert _kube_scheduler_binds_pinned(fake) == 3
    assert _hard_violations(fake, Policy()) == []


# -- 2. restart in the middle of a batch -----------------------------------------------------


def test_restart_mid_batch_new_binder_finishes_without_rebinding(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Binder A dies after 4 of 9 binds; B, starting from the cluster alone, binds the other 5."""
    fake = _synthetic(nodes=9, shards=3)
    policy = Policy()
    bind = fake.bind_pod

    def dies_after_four(
        namespace: str, name: str, uid: str | None, target: str, annotations: Annotations = None
    ) -> BindResult:
        with fake._lock:  # the count and the write as one step, whichever thread writes
            if len(fake.binds) >= 4:
                raise RuntimeError("binder A killed")
            return bind(namespace, name, uid, target, annotations)

    monkeypatch.setattr(fake, "bind_pod", dies_after_four)
    a = Binder(fake, policy)
    a.step(now=T0)
    with pytest.raises(RuntimeError, match="killed"):
        a.step(now=T0 + 1.5)
    by_a = {key: target for key, target in fake.binds}
    assert len(by_a) == 4
    monkeypatch.setattr(fake, "bind_pod", bind)

    b = Binder(fake, policy)
    solves = _record_solves(b, monkeypatch)
    report = _batch(b, T0 + 5)
    assert report.solve_status in ("OPTIMAL", "FEASIBLE") and report.failed == []
    redis_pods = {k for k, p in fake.pods.items() if p["metadata"]["labels"].get("app") == "redis"}
    assert len(redis_pods) == 9
    assert {_key(name) for name, _ in report.bound} == redis_pods - set(by_a)
    assert _binds_per_pod(fake) == Counter(dict.fromkeys(redis_pods, 1))
    assert all(_node_of(fake, f"{k[0]}/{k[1]}") == target for k, target in by_a.items())

    snapshot, plan = solves[0]
    kept = {a.pod: a.node for a in plan.assignments if a.action == "keep"}
    assert kept == {f"{k[0]}/{k[1]}": target for k, target in by_a.items()}
    assert plan.hard_violations == []
    assert [v for v in check_plan(snapshot, policy, plan) if v.severity == "hard"] == []
    assert _hard_violations(fake, policy) == []

    b.cache.poll(0)
    assert b.step(now=T0 + 8).bound == [] and len(fake.binds) == 9


def test_restart_mid_batch_in_gate_mode_pins_each_pod_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Pins survive the restart in the cluster; B counts them and pins only what is still gated."""
    fake = FakeKubeAdapter(nodes=_nodes(9), pods=[*_shard(0, gated=True), *_shard(1, gated=True)])
    policy = Policy()
    config = BinderConfig(enforce="gate")
    pin = fake.pin_and_ungate

    def dies_after_two(*args: Any, **kwargs: Any) -> PatchResult:
        with fake._lock:  # the count and the write as one step, whichever thread writes
            if sum(_pin_writes(fake).values()) >= 2:
                raise RuntimeError("binder A killed")
            return pin(*args, **kwargs)

    monkeypatch.setattr(fake, "pin_and_ungate", dies_after_two)
    a = Binder(fake, policy, config)
    with pytest.raises(RuntimeError):
        a.step(now=T0)  # pinned at once (kube-scheduler holds nothing): A dies mid-batch
    pinned_by_a = {k: pinned_node(p) for k, p in fake.pods.items() if pinned_node(p)}
    assert len(pinned_by_a) == 2
    monkeypatch.setattr(fake, "pin_and_ungate", pin)

    b = Binder(fake, policy, config)
    solves = _record_solves(b, monkeypatch)
    report = _batch(b, T0 + 5)
    assert {_key(name) for name, _ in report.bound} == set(fake.pods) - set(pinned_by_a)
    assert _pin_writes(fake) == Counter(dict.fromkeys(fake.pods, 1))
    assert {k: pinned_node(p) for k, p in fake.pods.items() if k in pinned_by_a} == pinned_by_a
    assert fake.binds == []
    snapshot, plan = solves[0]
    assert {a.pod for a in plan.assignments if a.action == "keep"} == {
        f"{k[0]}/{k[1]}" for k in pinned_by_a
    }
    assert [v for v in check_plan(snapshot, policy, plan) if v.severity == "hard"] == []
    assert _kube_scheduler_binds_pinned(fake) == 6
    assert _hard_violations(fake, policy) == []


def test_restarted_binder_takes_a_conflict_naming_its_own_node_as_bound(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The old leader bound the pod where we planned it: 409 naming our node means done."""
    fake = FakeKubeAdapter(nodes=_nodes(6), pods=[*_shard(0), *_shard(1)])
    binder = Binder(fake, Policy(), GREEDY)

    def old_leader_binds_first(plan: Plan) -> None:
        target = _placements(plan)["default/c-0-0"]
        uid = fake.pods[("default", "c-0-0")]["metadata"]["uid"]
        assert fake.bind_pod("default", "c-0-0", uid, target).ok

    solves = _record_solves(binder, monkeypatch, after=old_leader_binds_first)
    report = _batch(binder, T0)
    planned = _placements(solves[0][1])
    assert sorted(report.bound) == sorted(planned.items())
    assert report.failed == [] and binder._retry == {}
    assert _binds_per_pod(fake) == Counter(dict.fromkeys(fake.pods, 1))
    assert len(_events(fake, "Scheduled", "default/c-0-0")) == 1
    assert _sample(binder, "redis_placer_binds_total", result="conflict") == 1
    assert _sample(binder, "redis_placer_binds_total", result="bound") == 5
    assert _sample(binder, "redis_placer_bind_errors_total", reason="already_bound") == 1
    assert report.next_step_in > 0


def test_restart_mid_batch_finishes_a_shard_whose_roles_the_solver_chose(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Pods without a role label get one master from the solver; a restart must not strand them."""
    fake = FakeKubeAdapter(nodes=_nodes(6), pods=_shard(0, roles=False))
    bind = fake.bind_pod

    def dies_after_two(
        namespace: str, name: str, uid: str | None, target: str, annotations: Annotations = None
    ) -> BindResult:
        with fake._lock:  # the count and the write as one step, whichever thread writes
            if len(fake.binds) >= 2:
                raise RuntimeError("binder A killed")
            return bind(namespace, name, uid, target, annotations)

    monkeypatch.setattr(fake, "bind_pod", dies_after_two)
    a = Binder(fake, Policy(), GREEDY)
    a.step(now=T0)
    with pytest.raises(RuntimeError):
        a.step(now=T0 + 1.5)
    monkeypatch.setattr(fake, "bind_pod", bind)
    assert len(fake.binds) == 2

    b = Binder(fake, Policy(), GREEDY)
    for t in (T0 + 5, T0 + 6.5, T0 + 40, T0 + 41.5):
        b.step(now=t)
    assert len(fake.binds) == 3, "the third member of the shard is never placed"
    roles = Counter(p["metadata"]["labels"].get("redis-role") for p in fake.pods.values())
    assert roles == Counter({"master": 1, "replica": 2})  # the plan's roles, written down
    assert _hard_violations(fake, Policy()) == []


# -- 3. another binder got there first -------------------------------------------------------


def _bound_elsewhere_first(
    fake: FakeKubeAdapter,
    monkeypatch: pytest.MonkeyPatch,
    solves: list[tuple[Snapshot, Plan]],
    choose: Callable[[str, dict[str, str]], str],
) -> list[PodKey]:
    """Before our first bind lands, another actor binds that pod to ``choose(pod, plan)``."""
    attempts: list[PodKey] = []
    bind = fake.bind_pod

    def racing(
        namespace: str, name: str, uid: str | None, target: str, annotations: Annotations = None
    ) -> BindResult:
        if not attempts:
            pod = f"{namespace}/{name}"
            assert bind(namespace, name, uid, choose(pod, _placements(solves[-1][1]))).ok
        attempts.append((namespace, name))
        return bind(namespace, name, uid, target, annotations)

    monkeypatch.setattr(fake, "bind_pod", racing)
    return attempts


def test_pod_bound_elsewhere_by_another_binder_is_not_bound_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A 409 naming another node: re-read the pod, back off, never bind it a second time."""
    fake = FakeKubeAdapter(nodes=_nodes(9), pods=[*_shard(0), *_shard(1)])
    policy = Policy()
    binder = Binder(fake, policy, GREEDY)
    solves = _record_solves(binder, monkeypatch)

    def unused_node(_: str, planned: dict[str, str]) -> str:
        return sorted(set(fake.nodes) - set(planned.values()))[0]

    attempts = _bound_elsewhere_first(fake, monkeypatch, solves, unused_node)
    report = _batch(binder, T0)
    raced = attempts[0]
    elsewhere = fake.pods[raced]["spec"]["nodeName"]
    assert elsewhere not in _placements(solves[0][1]).values()
    assert [name for name, _ in report.failed] == [f"{raced[0]}/{raced[1]}"]
    assert report.failed[0][1].startswith("conflict") and elsewhere in report.failed[0][1]
    assert binder.cache.pods[raced]["spec"]["nodeName"] == elsewhere
    shard = _shard_of(f"{raced[0]}/{raced[1]}")
    assert binder._retry == {shard: (1, T0 + 1.5)} and report.next_step_in == 0.0
    assert _sample(binder, "redis_placer_binds_total", result="conflict") == 1
    assert _sample(binder, "redis_placer_bind_errors_total", reason="http_409") == 1
    assert _events(fake, "Scheduled", f"{raced[0]}/{raced[1]}") == []

    binder.cache.poll(0)
    for t in (T0 + 1.5, T0 + 3.0, T0 + 10.0):
        binder.step(now=t)
    assert attempts.count(raced) == 1
    assert fake.binds.count((raced, elsewhere)) == 1 and _binds_per_pod(fake)[raced] == 1
    assert _binds_per_pod(fake) == Counter(dict.fromkeys(fake.pods, 1))
    assert _hard_violations(fake, policy) == []


def test_shard_is_not_bound_onto_the_node_another_binder_took(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The other actor put our master where we meant a replica; that replica must go elsewhere."""
    fake = FakeKubeAdapter(nodes=_nodes(9), pods=_shard(0))
    policy = Policy()
    binder = Binder(fake, policy, GREEDY)
    solves = _record_solves(binder, monkeypatch)

    def a_sibling_node(pod: str, planned: dict[str, str]) -> str:
        return next(target for name, target in sorted(planned.items()) if name != pod)

    attempts = _bound_elsewhere_first(fake, monkeypatch, solves, a_sibling_node)
    binder.step(now=T0)
    binder.step(now=T0 + 1.5)
    binder.cache.poll(0)
    for t in (T0 + 1.5, T0 + 3.0, T0 + 10.0, T0 + 11.5):
        binder.step(now=t)
    assert attempts.count(attempts[0]) == 1
    assert _binds_per_pod(fake) == Counter(dict.fromkeys(fake.pods, 1))
    assert _hard_violations(fake, policy) == []


# -- 4. deleted between solve and bind -------------------------------------------------------


def test_pod_deleted_between_solve_and_bind_is_forgotten(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A 404 is not an error to raise: forget the pod, bind the rest, place its successor later."""
    fake = FakeKubeAdapter(nodes=_nodes(9), pods=[*_shard(0), *_shard(1)])
    policy = Policy()
    binder = Binder(fake, policy, GREEDY)
    recreated = copy.deepcopy(fake.pods[("default", "c-0-1")])
    deleted: list[PodKey] = []

    def delete_replica(_: Plan) -> None:
        if not deleted:
            fake.delete_pod("default", "c-0-1")
            deleted.append(("default", "c-0-1"))

    solves = _record_solves(binder, monkeypatch, after=delete_replica)
    report = _batch(binder, T0)
    assert [name for name, _ in report.failed] == ["default/c-0-1"]
    assert report.failed[0][1].startswith("gone")
    assert ("default", "c-0-1") not in binder.cache.pods
    assert sorted(name for name, _ in report.bound) == [
        "default/c-0-0",
        "default/c-0-2",
        "default/c-1-0",
        "default/c-1-1",
        "default/c-1-2",
    ]
    assert binder._retry == {"default/c/0": (1, T0 + 1.5)}
    assert _sample(binder, "redis_placer_binds_total", result="gone") == 1
    assert _sample(binder, "redis_placer_bind_errors_total", reason="http_404") == 1
    assert _events(fake, "Scheduled", "default/c-0-1") == []

    binder.cache.poll(0)
    assert binder.step(now=T0 + 2).decisions == []  # nothing of ours is pending
    del recreated["metadata"]["uid"], recreated["metadata"]["resourceVersion"]
    fake.add_pod(recreated)
    binder.cache.poll(0)
    successor = _batch(binder, T0 + 10)
    assert [name for name, _ in successor.bound] == ["default/c-0-1"]
    assert len(solves) == 2
    assert _binds_per_pod(fake) == Counter(dict.fromkeys(fake.pods, 1))
    assert _hard_violations(fake, policy) == []


def test_pod_recreated_under_the_same_name_is_not_bound_with_the_old_uid(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The uid precondition stops a plan for the old pod from binding its same-named successor."""
    fake = FakeKubeAdapter(nodes=_nodes(6), pods=_shard(0))
    binder = Binder(fake, Policy(), GREEDY)
    old_uid = fake.pods[("default", "c-0-2")]["metadata"]["uid"]

    def recreate(_: Plan) -> None:
        pod = copy.deepcopy(fake.pods[("default", "c-0-2")])
        if pod["metadata"]["uid"] == old_uid:
            fake.delete_pod("default", "c-0-2")
            del pod["metadata"]["uid"], pod["metadata"]["resourceVersion"]
            fake.add_pod(pod)

    _record_solves(binder, monkeypatch, after=recreate)
    report = _batch(binder, T0)
    assert [name for name, _ in report.failed] == ["default/c-0-2"]
    assert "UID" in report.failed[0][1]
    new = fake.pods[("default", "c-0-2")]
    assert new["metadata"]["uid"] != old_uid and "nodeName" not in new["spec"]
    assert binder.cache.pods[("default", "c-0-2")]["metadata"]["uid"] == new["metadata"]["uid"]

    retry = _batch(binder, T0 + 1.5)
    assert [name for name, _ in retry.bound] == ["default/c-0-2"]
    assert _binds_per_pod(fake) == Counter(dict.fromkeys(fake.pods, 1))
    assert _hard_violations(fake, Policy()) == []


# -- 5. partial failure of a batch -----------------------------------------------------------


def test_failed_shard_backs_off_exponentially_and_the_other_shard_is_untouched(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Shard 1's binds fail (API errors) until healed; shard 0, bound first, is never revisited."""
    fake = FakeKubeAdapter(nodes=_nodes(6), pods=[*_shard(0), *_shard(1)])
    policy = Policy()
    binder = Binder(
        fake, policy, BinderConfig(solver="greedy", retry_base_seconds=1.0, retry_max_seconds=3.0)
    )
    attempts: list[PodKey] = []
    broken = [True]
    bind = fake.bind_pod

    def flaky(
        namespace: str, name: str, uid: str | None, target: str, annotations: Annotations = None
    ) -> BindResult:
        attempts.append((namespace, name))
        if broken[0] and name.startswith("c-1-"):
            return BindResult(BindOutcome.ERROR, 500, "etcdserver: request timed out")
        return bind(namespace, name, uid, target, annotations)

    monkeypatch.setattr(fake, "bind_pod", flaky)
    first = _batch(binder, T0)
    t = T0 + 1.5
    assert sorted(name for name, _ in first.bound) == [f"default/c-0-{i}" for i in range(3)]
    # The shard stops at its first failure: its siblings wait for a re-solve.
    assert [name for name, _ in first.failed] == ["default/c-1-0"]
    assert all("etcdserver" in why for _, why in first.failed)
    assert first.next_step_in == 0.0
    assert binder._retry == {"default/c/1": (1, t)}  # the first retry is immediate
    shard0 = {k: target for k, target in fake.binds}

    expected_delays = [2.0, 3.0]  # 1 s base doubling, capped at 3 s
    for attempt, delay in enumerate(expected_delays, start=2):
        retry = _batch(binder, t)
        t += 1.5
        assert retry.bound == [] and len(retry.failed) == 1 and retry.next_step_in == 0.0
        assert binder._retry == {"default/c/1": (attempt, t + delay)}
        waiting = binder.step(now=t)
        assert waiting.solve_status is None and waiting.next_step_in == pytest.approx(delay)
        halfway = binder.step(now=t + delay / 2)
        assert halfway.solve_status is None
        assert halfway.next_step_in == pytest.approx(delay / 2)
        t += delay

    broken[0] = False
    healed = _batch(binder, t)
    assert sorted(name for name, _ in healed.bound) == [f"default/c-1-{i}" for i in range(3)]
    assert binder._retry == {}
    assert _sample(binder, "redis_placer_solves_total", status="FEASIBLE") == 4
    assert _sample(binder, "redis_placer_binds_total", result="error") == 3
    assert _sample(binder, "redis_placer_bind_errors_total", reason="http_500") == 3
    assert _sample(binder, "redis_placer_binds_total", result="bound") == 6
    assert sum(1 for key in attempts if key[1].startswith("c-0-")) == 3
    assert {k: target for k, target in fake.binds if k in shard0} == shard0
    assert _binds_per_pod(fake) == Counter(dict.fromkeys(fake.pods, 1))
    assert _hard_violations(fake, policy) == []


def test_unplaceable_shard_backs_off_once_per_solve_not_once_per_pod() -> None:
    """The backoff counts attempts at the shard, whatever its size."""
    fake = FakeKubeAdapter(nodes=_nodes(3, memory="512Mi"), pods=_shard(0))
    binder = Binder(fake, Policy(), GREEDY)
    report = _batch(binder, T0)
    assert len(report.unplaced) == 3
    assert binder._retry == {"default/c/0": (1, T0 + 1.5 + 1.0)}


# -- 6. input that cannot be read ------------------------------------------------------------


def test_pod_with_an_unreadable_memory_request_is_skipped_with_a_warning() -> None:
    """One bad pod holds its own shard (still incomplete), never the other shards."""
    pods = [*_shard(0, annotate=True), *_shard(1, annotate=True), *_shard(2, annotate=True)]
    bad = pods[1]
    bad["spec"]["containers"][0]["resources"]["requests"]["memory"] = "12 potatoes"
    fake = FakeKubeAdapter(nodes=_nodes(9), pods=pods)
    binder = Binder(fake, Policy(), GREEDY)
    report = _batch(binder, T0)
    assert sorted(name for name, _ in report.bound) == [
        f"default/c-{s}-{i}" for s in (1, 2) for i in range(3)
    ]
    (warning,) = _events(fake, "FailedScheduling", "default/c-0-1")
    assert warning["type"] == "Warning"
    assert "12 potatoes" in warning["message"]
    assert "default/c-0-1: spec.containers[0].resources" in warning["message"]
    assert _sample(binder, "redis_placer_permit_decisions_total", decision="reject") == 1
    decisions = {d.shard: d.decision for d in report.decisions}
    assert decisions == {"default/c/0": "wait", "default/c/1": "allow", "default/c/2": "allow"}
    assert not any(key[1].startswith("c-0-") for key, _ in fake.binds)
    assert len(_events(fake, "WaitingForShard")) == 2


def test_unreadable_pod_warning_is_posted_once_not_every_step() -> None:
    """A pod that stays unreadable is announced once, however often the binder steps."""
    pods = [*_shard(0), *_shard(1)]
    pods[0]["spec"]["containers"][0]["resources"]["requests"]["memory"] = "12 potatoes"
    fake = FakeKubeAdapter(nodes=_nodes(6), pods=pods)
    binder = Binder(fake, Policy(), GREEDY)
    for t in (T0, T0 + 30, T0 + 60, T0 + 90):
        binder.step(now=t)
        fake.patch_pod_labels("default", "c-1-0", {"touched": f"{t:g}"})
        binder.cache.poll(0)  # the cluster moves on, so every step reads it again
    assert len(_events(fake, "FailedScheduling", "default/c-0-0")) == 1
    assert _sample(binder, "redis_placer_permit_decisions_total", decision="reject") == 1
    assert len(fake.binds) == 5 and ("default", "c-0-0") not in _binds_per_pod(fake)


def test_pod_without_a_shard_label_is_rejected_with_a_warning_once() -> None:
    """A pod that names no shard cannot join a gang: one Warning, one reject, others bound."""
    pods = [*_shard(0), *_shard(1)]
    del pods[2]["metadata"]["labels"]["redis-shard"]
    fake = FakeKubeAdapter(nodes=_nodes(6), pods=pods)
    binder = Binder(fake, Policy(), GREEDY)
    report = _batch(binder, T0)
    binder.cache.poll(0)
    binder.step(now=T0 + 10)
    binder.step(now=T0 + 20)
    assert sorted(name for name, _ in report.bound) == [
        "default/c-0-0",
        "default/c-0-1",
        *[f"default/c-1-{i}" for i in range(3)],
    ]
    assert fake.pods[("default", "c-0-2")]["spec"].get("nodeName") is None
    (warning,) = _events(fake, "FailedScheduling", "default/c-0-2")
    assert warning["type"] == "Warning"
    assert "redis-shard" in warning["message"] and "missing" in warning["message"]
    assert _sample(binder, "redis_placer_permit_decisions_total", decision="reject") == 1
    assert _sample(binder, "redis_placer_pending_pods") == 1


# -- 7. metrics ------------------------------------------------------------------------------


def test_metrics_after_a_bind_batch() -> None:
    """Counters move once per pod and decision, the gauge follows the pending set."""
    pods = [*(p for s in range(4) for p in _shard(s)), *_shard(4, size=3)]
    for pod in pods[-3:]:
        pod["metadata"]["annotations"] = {SHARD_SIZE: "4"}  # one member still to come
    fake = FakeKubeAdapter(nodes=_nodes(12), pods=pods)
    registry = CollectorRegistry()
    binder = Binder(fake, Policy(), GREEDY, metrics=Metrics(registry))
    assert binder.metrics.registry is registry

    def sample(name: str, **labels: str) -> float | None:
        value: float | None = registry.get_sample_value(name, labels)
        return value

    opened = binder.step(now=T0)
    assert opened.bound == []
    assert sample("redis_placer_pending_pods") == 15
    assert sample("redis_placer_permit_decisions_total", decision="wait") == 3
    assert sample("redis_placer_permit_decisions_total", decision="allow") == 0
    assert sample("redis_placer_binds_total", result="bound") == 0
    assert sample("redis_placer_solves_total", status="FEASIBLE") is None

    solved = binder.step(now=T0 + 1.5)
    assert len(solved.bound) == 12
    assert sample("redis_placer_binds_total", result="bound") == 12
    assert sample("redis_placer_permit_decisions_total", decision="allow") == 12
    assert sample("redis_placer_permit_decisions_total", decision="wait") == 3
    assert sample("redis_placer_permit_decisions_total", decision="reject") == 0
    assert sample("redis_placer_solves_total", status="FEASIBLE") == 1
    assert sample("redis_placer_solve_duration_seconds_count", mode="place") == 1
    for result in ("conflict", "gone", "error"):
        assert sample("redis_placer_binds_total", result=result) == 0

    binder.cache.poll(0)
    binder.step(now=T0 + 3)
    assert sample("redis_placer_pending_pods") == 3
    assert sample("redis_placer_gated_pods") == 0
    assert sample("redis_placer_binds_total", result="bound") == 12
    assert sample("redis_placer_permit_decisions_total", decision="allow") == 12
    assert sample("redis_placer_permit_decisions_total", decision="wait") == 3
    assert sample("redis_placer_solves_total", status="FEASIBLE") == 1


# -- 8. events -------------------------------------------------------------------------------


def test_scheduled_event_names_the_node_the_pod_was_bound_to() -> None:
    """kubectl describe pod shows where the pod went and as what."""
    fake = FakeKubeAdapter(nodes=_nodes(6), pods=[*_shard(0), *_shard(1)])
    binder = Binder(fake, Policy())
    report = _batch(binder, T0)
    assert len(report.bound) == 6
    for name, target in report.bound:
        (event,) = _events(fake, "Scheduled", name)
        pod = fake.pods[_key(name)]
        assert pod["spec"]["nodeName"] == target
        assert event["type"] == "Normal"
        assert event["message"].startswith(f"Successfully assigned {name} to {target}: ")
        role = "master" if name.endswith("-0") else "replica"
        assert f"{role} of shard {_shard_of(name)}" in event["message"]
        assert event["involvedObject"]["uid"] == pod["metadata"]["uid"]
        # Two shards, two masters: no placement keeps a majority after one loss; it says so
        # and what would.
        assert "no placement can survive losing a zone: " in event["message"]
        assert "has 2 masters: losing one leaves 1 of 2, no majority; 3" in event["message"]


def test_failed_scheduling_names_the_rule_that_blocks_the_shard() -> None:
    """Surviving a zone loss needs a third zone; the event says so, not just 'no'."""
    pods = [p for s in range(3) for p in _shard(s, size=2)]
    fake = FakeKubeAdapter(nodes=_nodes(6, zones=2), pods=pods)
    policy = Policy.model_validate({"rules": {"survive": "zone"}})
    binder = Binder(fake, policy)
    report = _batch(binder, T0)
    assert report.bound == [] and fake.binds == []
    assert len(report.unplaced) == 6
    events = _events(fake, "FailedScheduling")
    assert len(events) == 6
    for event in events:
        assert event["type"] == "Warning"
        assert "survive: zone needs the masters" in event["message"]
    assert _sample(binder, "redis_placer_permit_decisions_total", decision="reject") == 6


def test_failed_scheduling_for_nodes_too_small_is_announced_once_per_attempt() -> None:
    """The kube-scheduler style tally: posted by each solve that fails, not by idle steps."""
    fake = FakeKubeAdapter(nodes=_nodes(3, memory="512Mi"), pods=_shard(0))
    binder = Binder(fake, Policy())
    report = _batch(binder, T0)
    assert report.bound == [] and len(report.unplaced) == 3
    for i in range(3):
        (event,) = _events(fake, "FailedScheduling", f"default/c-0-{i}")
        assert event["type"] == "Warning"
        assert "0/3 nodes are available: 3 insufficient memory" in event["message"]
    not_before = binder._retry["default/c/0"][1]
    assert not_before > T0 + 1.5
    for t in (T0 + 1.6, (T0 + 1.5 + not_before) / 2):
        idle = binder.step(now=t)
        assert idle.solve_status is None
    assert len(_events(fake, "FailedScheduling")) == 3
    again = _batch(binder, T0 + 100)
    assert again.solve_status == "OPTIMAL" and len(again.unplaced) == 3
    assert len(_events(fake, "FailedScheduling")) == 6
    assert _sample(binder, "redis_placer_solves_total", status="OPTIMAL") == 2
    assert _sample(binder, "redis_placer_permit_decisions_total", decision="reject") == 6
    assert fake.binds == []
