"""The binder with volumes: pins where the PVs are, Pinned events in gate mode, bind mode's
refusal of unbound claims, and pins that kube-scheduler refuses (fake adapter)."""

import copy
from typing import Any

import pytest

from models.kube_objects import BATCH_ANNOTATION
from models.policy import Policy
from placer.binder.loop import PLACEMENT_GATE, Binder, BinderConfig, pinned_node
from placer.binder.refusals import REMEMBER_SECONDS, Refusals, scheduler_refusal
from placer.kube.fake import FakeKubeAdapter
from solver.predicates import blocking_reason
from tests.kube_dicts import node, redis_pod
from tests.volume_dicts import claim, local_pv, mounts, storage_class

T0 = 1000.0
GATE = BinderConfig(enforce="gate")


def _nodes(count: int) -> list[dict[str, Any]]:
    return [node(f"n{i}", f"z{i % 3}", f"r{i}") for i in range(count)]


def _pods(shards: int, *, gated: bool = True) -> list[dict[str, Any]]:
    extra: dict[str, Any] = (
        {"schedulerName": "default-scheduler", "schedulingGates": [{"name": PLACEMENT_GATE}]}
        if gated
        else {"schedulerName": "redis-placer"}
    )
    pods = []
    for s in range(shards):
        for r in range(2):
            name = f"redis-{s}-{r}"
            pod = redis_pod(
                name,
                "redis",
                s,
                "master" if r == 0 else "replica",
                **mounts(f"data-{name}"),
                **copy.deepcopy(extra),
            )
            pod["metadata"]["ownerReferences"] = [
                {"kind": "StatefulSet", "name": f"redis-{s}", "controller": True}
            ]
            pods.append(pod)
    return pods


def _volumes(pv_nodes: list[int], shards: int) -> list[dict[str, Any]]:
    objects: list[dict[str, Any]] = [storage_class("local-nvme")]
    objects += [local_pv(f"pv-n{i}", node=f"n{i}") for i in pv_nodes]
    objects += [claim(f"data-redis-{s}-{r}") for s in range(shards) for r in range(2)]
    return objects


def _batch(binder: Binder, now: float = T0) -> Any:
    """A batch's step: the window's close in bind mode; at once in gate mode, where
    kube-scheduler holds no pin yet."""
    first = binder.step(now=now)
    if first.solve_status is not None:
        return first
    return binder.step(now=now + 1.5)


def _events(fake: FakeKubeAdapter, reason: str) -> list[dict[str, Any]]:
    return [e for e in fake.events if e["reason"] == reason]


def test_gate_mode_pins_each_pod_to_a_node_holding_a_free_pv_and_says_pinned() -> None:
    fake = FakeKubeAdapter(
        nodes=_nodes(9), pods=_pods(3), volume_objects=_volumes([0, 1, 2, 3, 4, 5], 3)
    )
    binder = Binder(fake, Policy(), GATE)
    report = _batch(binder)
    assert report.failed == [] and len(report.bound) == 6
    pins = {pinned_node(pod) for pod in fake.pods.values()}
    assert pins == {"n0", "n1", "n2", "n3", "n4", "n5"}
    binder.background.flush()
    pinned = _events(fake, "Pinned")
    assert len(pinned) == 6
    assert all(" as master " in e["message"] or " as replica " in e["message"] for e in pinned)
    assert all(report.batch in e["message"] for e in pinned)
    assert _events(fake, "Scheduled") == []


def test_bind_mode_refuses_a_pod_whose_claim_is_not_bound_and_points_to_gate_mode() -> None:
    fake = FakeKubeAdapter(
        nodes=_nodes(6), pods=_pods(1, gated=False), volume_objects=_volumes([0, 1], 1)
    )
    binder = Binder(fake, Policy(), BinderConfig())
    report = _batch(binder)
    assert report.bound == [] and fake.binds == []
    binder.background.flush()
    refused = _events(fake, "FailedScheduling")
    assert {e["involvedObject"]["name"] for e in refused} == {"redis-0-0", "redis-0-1"}
    assert all("--enforce gate" in e["message"] for e in refused)


def test_bind_mode_binds_a_pod_whose_claim_is_bound_where_its_pv_is() -> None:
    pods = _pods(1, gated=False)
    volumes = [
        storage_class("local-nvme"),
        local_pv("pv-a", node="n4", claim="default/data-redis-0-0"),
        local_pv("pv-b", node="n2", claim="default/data-redis-0-1"),
        claim("data-redis-0-0", volume="pv-a"),
        claim("data-redis-0-1", volume="pv-b"),
    ]
    fake = FakeKubeAdapter(nodes=_nodes(6), pods=pods, volume_objects=volumes)
    report = _batch(Binder(fake, Policy(), BinderConfig()))
    assert sorted(report.bound) == [("default/redis-0-0", "n4"), ("default/redis-0-1", "n2")]


def _refused(pod: dict[str, Any], node_name: str) -> dict[str, Any]:
    """The pod as kube-scheduler leaves it after refusing the binder's pin to ``node_name``."""
    out = copy.deepcopy(pod)
    out["spec"].pop("schedulingGates", None)
    out["spec"]["affinity"] = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {
                        "matchFields": [
                            {"key": "metadata.name", "operator": "In", "values": [node_name]}
                        ]
                    }
                ]
            }
        }
    }
    out["metadata"].setdefault("annotations", {})[BATCH_ANNOTATION] = "run-1"
    out["status"]["conditions"] = [
        {
            "type": "PodScheduled",
            "status": "False",
            "reason": "Unschedulable",
            "message": "0/9 nodes are available: 1 node(s) didn't find available persistent "
            "volumes to bind",
        }
    ]
    return out


def test_scheduler_refusal_reads_the_podscheduled_condition() -> None:
    pod = _pods(1)[0]
    assert scheduler_refusal(pod) is None
    assert "persistent volumes" in (scheduler_refusal(_refused(pod, "n1")) or "")


def test_a_refused_pin_is_deleted_for_its_controller_and_the_new_pod_avoids_the_node() -> None:
    pods = _pods(1)
    # redis-0-0 was pinned to n0 and refused; PVs on n0, n3 (zone z0) and n1 (zone z1).
    refused = _refused(pods[0], "n0")
    fake = FakeKubeAdapter(
        nodes=_nodes(6),
        pods=[refused, pods[1]],
        volume_objects=_volumes([0, 1, 3], 1),
    )
    binder = Binder(fake, Policy(), BinderConfig(enforce="gate", recreate_refused=True))
    binder.step(now=T0)
    assert fake.deleted == [("default", "redis-0-0")]
    binder.background.flush()
    (event,) = _events(fake, "Repinning")
    assert "n0" in event["message"]
    fake.add_pod(pods[0])  # the StatefulSet recreates it, gated
    binder.cache.poll(0)
    _batch(binder, T0 + 2)
    # The recreated pod avoids the node refused to it; the shard takes two of the PVs, in two
    # zones (the refusal was redis-0-0's: its replica may still take n0's PV).
    recreated, replica = (pinned_node(fake.pods[("default", f"redis-0-{i}")]) for i in (0, 1))
    assert recreated in {"n1", "n3"}
    assert replica in {"n0", "n1", "n3"} and replica != recreated
    zone = {"n0": "z0", "n3": "z0", "n1": "z1"}
    assert zone[recreated] != zone[replica]


def test_without_recreate_a_refused_pin_is_said_on_the_pod_and_nothing_is_deleted() -> None:
    pods = _pods(1)
    fake = FakeKubeAdapter(
        nodes=_nodes(6), pods=[_refused(pods[0], "n0"), pods[1]], volume_objects=_volumes([1], 1)
    )
    binder = Binder(fake, Policy(), GATE)
    binder.step(now=T0)
    binder.step(now=T0 + 1)
    binder.background.flush()
    assert fake.deleted == []
    (event,) = _events(fake, "PinRefused")
    assert "--recreate-refused" in event["message"] and "n0" in event["message"]


def test_refused_nodes_are_forgotten_after_a_while() -> None:
    now = [T0]
    fake = FakeKubeAdapter()
    refusals = Refusals(fake, lambda *_: None, recreate=False, clock=lambda: now[0])
    pod = _refused(_pods(1)[0], "n0")
    assert refusals.observe(pod, "n0")
    assert refusals.excluded(("default", "redis-0-0")) == ["n0"]
    now[0] += 3600
    assert refusals.excluded(("default", "redis-0-0")) == []


def test_a_pod_held_by_an_immediate_claim_says_why_and_is_placed_once_it_binds(
    monkeypatch: Any,
) -> None:
    import time

    import placer.binder.volumes

    monkeypatch.setattr(placer.binder.volumes, "REFRESH_SECONDS", 0.01)
    pods = _pods(1)
    volumes = [
        storage_class("fast", provisioner="ebs.csi.aws.com", mode="Immediate"),
        claim("data-redis-0-0", storage_class="fast"),
        claim("data-redis-0-1", storage_class="fast"),
    ]
    fake = FakeKubeAdapter(nodes=_nodes(6), pods=pods, volume_objects=volumes)
    binder = Binder(fake, Policy(), GATE)
    report = _batch(binder)
    assert report.bound == [] and len(report.unplaced) == 2
    binder.background.flush()
    held = _events(fake, "FailedScheduling")
    assert held and all("Immediate" in e["message"] for e in held)
    # The PV controller binds both claims, to zonal disks of zones z1 and z2; no pod changes.
    fake.volume_objects = [
        volumes[0],
        local_pv("disk-0", zone="z1", storage_class="fast", claim="default/data-redis-0-0"),
        local_pv("disk-1", zone="z2", storage_class="fast", claim="default/data-redis-0-1"),
        claim("data-redis-0-0", storage_class="fast", volume="disk-0"),
        claim("data-redis-0-1", storage_class="fast", volume="disk-1"),
    ]
    time.sleep(0.05)
    later = T0 + 120
    binder.step(now=later)
    binder.step(now=later + 1.5)
    zones = {pinned_node(p) for p in fake.pods.values()}
    assert None not in zones
    node_zone = {f"n{i}": f"z{i % 3}" for i in range(6)}
    pins = {k[1]: node_zone[pinned_node(p) or ""] for k, p in fake.pods.items()}
    assert pins == {"redis-0-0": "z1", "redis-0-1": "z2"}


def test_a_refused_node_lapses_without_a_pod_event_and_others_are_read_on_events_only(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Between events, a build reads again our pods with nodes refused lately (those lapse on
    their own, ``REMEMBER_SECONDS``, with no event to say so) and pins kube-scheduler may
    refuse; a pod of ours with no refused node, or a running pod, only when the watch
    changes it."""
    now = [T0]
    pods = _pods(1)
    fake = FakeKubeAdapter(
        nodes=_nodes(6),
        pods=[_refused(pods[0], "n0"), pods[1]],
        volume_objects=_volumes([0, 1, 3], 1),
    )
    config = BinderConfig(enforce="gate", recreate_refused=True)
    binder = Binder(fake, Policy(), config, clock=lambda: now[0])
    binder.step(now=T0)  # the refused pin is deleted for its controller
    fake.add_pod(pods[0])  # and recreated, gated
    binder.cache.poll(0)
    read: list[str] = []
    classify = binder.reader._classify

    def counted(key: tuple[str, str], pod: dict[str, Any] | None) -> None:
        read.append(key[1])
        classify(key, pod)

    monkeypatch.setattr(binder.reader, "_classify", counted)

    def member_pod(name: str) -> Any:
        snapshot = binder.reader.read()[0]
        return next(m.pod for m in snapshot.members if m.pod.name == name)

    def another_event() -> str:
        name = f"other-{len(fake.pods)}"
        fake.add_pod(redis_pod(name, "elsewhere", 0, None, nodeName="n5"))
        binder.cache.poll(0)
        return name

    n0 = next(n for n in binder.reader.read()[0].nodes if n.name == "n0")
    assert blocking_reason(member_pod("redis-0-0"), n0) is not None  # n0 stays excluded
    read.clear()
    added = another_event()
    assert blocking_reason(member_pod("redis-0-0"), n0) is not None
    assert "redis-0-0" in read and added in read
    read.clear()
    another_event()
    member_pod("redis-0-0")
    assert added not in read  # running, unchanged
    now[0] += REMEMBER_SECONDS + 1
    another_event()  # the lapse is noticed at the next build
    assert blocking_reason(member_pod("redis-0-0"), n0) is None
    read.clear()
    another_event()
    member_pod("redis-0-0")
    assert "redis-0-0" not in read  # ours, pending, unchanged, no refused node now
