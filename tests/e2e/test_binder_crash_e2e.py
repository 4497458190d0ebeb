"""The binder process on a real API server, killed, doubled, and surprised by its nodes.

Each binder here is ``python -m placer.cli binder`` run as a child process, as deployed, so a
SIGKILL is a real one: no handler runs, no Lease is released, requests in flight are cut. The
rollout is a Redis cluster whose pods arrive shard after shard, without role labels (the
solver picks each master), sized by the ``redis-placer.io/shard-size`` annotation.

"Planned" is checked against the binder's own record: before it writes a shard it logs
``plan batch=<id> shard=<s> pods=<ns/pod>@<node>:<role>,...`` (flushed before the first write)
and every Binding carries ``redis-placer.io/batch: <id>``, which the server copies onto the pod
in the same write. A pod is bound to the node it was planned for when its node is the one the
plan line of its own batch names, in whichever binder process wrote it.
"""

import os
import random
import re
import signal
import subprocess
import sys
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import pytest
from kubernetes.client import ApiClient, CoreV1Api

from models.kube_objects import (
    BATCH_ANNOTATION,
    ROLE_ANNOTATION,
    SHARD_SIZE_ANNOTATION,
    build_snapshot,
)
from models.policy import Policy
from placer.kube.adapter import KubernetesAdapter
from solver.check import audit
from tests.e2e.control_plane import ControlPlane, create_node, json_of, stop_child

pytestmark = pytest.mark.e2e

POLICY = Policy()
ROOT = Path(__file__).resolve().parents[2]
RUN_LABEL = "e2e-run"
CLUSTER = "crash"
MEMBERS = 3
PLAN_LINE = re.compile(r" plan batch=(\S+) shard=\S+ pods=(\S+)")
PLACED_LINE = re.compile(r" placed batch=(\S+) shard=\S+ mode=\S+ pods=(\S+)")
Pod = dict[str, Any]


# -- the cluster -----------------------------------------------------------------------------


def create_nodes(api: ApiClient, run_id: str, zones: int = 3, per_zone: int = 6) -> list[str]:
    """Ready nodes, two per rack; only this test's pods select them."""
    names = []
    for z in range(zones):
        for i in range(per_zone):
            name = f"crash-{run_id}-{z}-{i}"
            labels = {
                POLICY.topology.zone: f"zone-{z}",
                POLICY.topology.rack: f"rack-{z}-{i // 2}",
                RUN_LABEL: run_id,
            }
            create_node(api, name, labels, cpu="4", memory="8Gi")
            names.append(name)
    return names


def pod_body(shard: int, index: int, run_id: str) -> Pod:
    labels = {**POLICY.selector, POLICY.labels.cluster: CLUSTER, POLICY.labels.shard: str(shard)}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": f"{CLUSTER}-{shard}-{index}",
            "labels": labels,
            "annotations": {SHARD_SIZE_ANNOTATION: str(MEMBERS)},
        },
        "spec": {
            "schedulerName": POLICY.scheduler_name,
            "nodeSelector": {RUN_LABEL: run_id},
            "terminationGracePeriodSeconds": 0,
            "containers": [
                {
                    "name": "redis",
                    "image": "redis:7.2",
                    "resources": {"requests": {"cpu": "250m", "memory": "512Mi"}},
                }
            ],
        },
    }


def create_shards(api: ApiClient, namespace: str, run_id: str, shards: range) -> None:
    core = CoreV1Api(api)
    for shard in shards:
        for index in range(MEMBERS):
            body = pod_body(shard, index, run_id)
            json_of(core.create_namespaced_pod(namespace, body, _preload_content=False))  # type: ignore[arg-type]


def read_pods(api: ApiClient, namespace: str) -> dict[str, Pod]:
    items = json_of(CoreV1Api(api).list_namespaced_pod(namespace, _preload_content=False))["items"]
    return {p["metadata"]["name"]: p for p in items}


def bound(api: ApiClient, namespace: str) -> dict[str, str]:
    return {
        name: p["spec"]["nodeName"]
        for name, p in read_pods(api, namespace).items()
        if p["spec"].get("nodeName")
    }


def hard_violations(api: ApiClient, namespace: str, run_id: str) -> list[Any]:
    adapter = KubernetesAdapter(api, instance="e2e-check")
    nodes = adapter.list_nodes(label_selector=f"{RUN_LABEL}={run_id}")
    snapshot = build_snapshot([*nodes, *adapter.list_pods(namespace)], POLICY)
    return [v for v in audit(snapshot, POLICY) if v.severity == "hard"]


def wait_for(check: Callable[[], bool], timeout: float, interval: float = 0.2) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(interval)
    return check()


# -- binder processes ------------------------------------------------------------------------


@dataclass
class BinderProcess:
    """One ``redis-placer binder`` child process and its log."""

    plane: ControlPlane
    namespace: str
    name: str
    log_path: Path
    leader_elect: bool = True
    extra: tuple[str, ...] = ("--time-limit", "1")
    popen: subprocess.Popen[bytes] | None = None
    starts: int = 0

    def start(self) -> "BinderProcess":
        args = [
            sys.executable, "-m", "placer.cli", "binder",
            "--kubeconfig", str(self.plane.kubeconfig),
            "--namespace", self.namespace,
            "--lease-namespace", self.namespace,
            "--metrics-port", "0",
            "--leader-elect" if self.leader_elect else "--no-leader-elect",
            *self.extra,
        ]  # fmt: skip
        env = {**os.environ, "POD_NAME": self.name, "NO_PROXY": "127.0.0.1,localhost"}
        with self.log_path.open("ab") as log:
            self.popen = subprocess.Popen(
                args, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env,
                cwd=ROOT,
            )  # fmt: skip
        self.starts += 1
        return self

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def alive(self) -> bool:
        return self.popen is not None and self.popen.poll() is None

    def kill(self) -> None:
        """SIGKILL, to this child only, by its pid."""
        assert self.popen is not None
        self.popen.send_signal(signal.SIGKILL)
        self.popen.wait(timeout=30)

    def stop(self) -> None:
        if self.popen is not None:
            stop_child(self.popen, timeout=30)


@dataclass
class Decisions:
    """What the binder logs say it planned and wrote, over every process and restart."""

    planned: dict[tuple[str, str], tuple[str, str]] = field(default_factory=dict)
    """(batch, pod name) -> (node, role)."""
    written: dict[str, list[tuple[str, str]]] = field(default_factory=lambda: defaultdict(list))
    """pod name -> [(batch, node)] of every Binding a binder logged as its own write."""

    @classmethod
    def read(cls, *logs: str) -> "Decisions":
        decisions = cls()
        for text in logs:
            for batch, pods in PLAN_LINE.findall(text):
                for entry in pods.split(","):
                    pod, _, rest = entry.partition("@")
                    node, _, role = rest.partition(":")
                    decisions.planned[(batch, pod.split("/", 1)[1])] = (node, role)
            for batch, pods in PLACED_LINE.findall(text):
                for entry in pods.split(","):
                    pod, _, node = entry.partition("@")
                    decisions.written[pod.split("/", 1)[1]].append((batch, node))
        return decisions


def planned_since(binder: BinderProcess, plans: int) -> bool:
    return binder.log().count(" plan batch=") > plans


def assert_planned(pods: dict[str, Pod], decisions: Decisions) -> None:
    """Every pod bound where the plan of its own batch put it, with the role it chose."""
    for name, pod in pods.items():
        annotations = pod["metadata"].get("annotations") or {}
        batch = annotations.get(BATCH_ANNOTATION)
        assert batch, f"{name} carries no batch: not bound by a binder"
        assert (batch, name) in decisions.planned, f"{name}: batch {batch} logged no plan for it"
        node, role = decisions.planned[(batch, name)]
        assert pod["spec"]["nodeName"] == node, (name, batch, node)
        assert annotations.get(ROLE_ANNOTATION) == role, (name, batch, role)
        for logged_batch, logged_node in decisions.written.get(name, []):
            assert logged_node == pod["spec"]["nodeName"], (name, logged_batch, logged_node)


# -- SIGKILL at random moments ---------------------------------------------------------------


def test_a_binder_killed_at_random_moments_and_restarted_places_every_pod_as_planned(
    control_plane: ControlPlane, kube_api: ApiClient, namespace: str, run_id: str, tmp_path: Path
) -> None:
    create_nodes(kube_api, run_id)
    seed = int.from_bytes(bytes.fromhex(run_id), "big")
    rng = random.Random(seed)
    binder = BinderProcess(control_plane, namespace, "crash-binder", tmp_path / "binder.log")
    shards, waves = 16, 4
    per_wave = shards // waves
    kills: list[tuple[str, int]] = []  # (when, pods bound at that moment)
    try:
        binder.start()
        for wave in range(waves):
            create_shards(
                kube_api, namespace, run_id, range(wave * per_wave, (wave + 1) * per_wave)
            )
            if wave == waves - 1:
                break
            plans_before = binder.log().count(" plan batch=")
            if wave == 1:
                # right after a plan is logged: its Bindings are in flight or about to be
                assert wait_for(partial(planned_since, binder, plans_before), 60, 0.01)
                moment = "just after a plan"
            else:
                delay = rng.uniform(0.2, 2.5)
                time.sleep(delay)
                moment = f"{delay:.2f} s after the wave"
            binder.kill()
            kills.append((moment, len(bound(kube_api, namespace))))
            binder.start()
        total = shards * MEMBERS
        assert wait_for(lambda: len(bound(kube_api, namespace)) == total, 120), (
            f"seed {seed}: {len(bound(kube_api, namespace))}/{total} bound; kills {kills}\n"
            + binder.log()[-4000:]
        )
    finally:
        binder.stop()
    assert len(kills) >= 3 and binder.starts == len(kills) + 1
    assert all(count < shards * MEMBERS for _, count in kills), kills  # each mid-rollout
    pods = read_pods(kube_api, namespace)
    assert len(pods) == shards * MEMBERS
    assert hard_violations(kube_api, namespace, run_id) == []
    assert_planned(pods, Decisions.read(binder.log()))
    roles = Counter(p["metadata"]["annotations"][ROLE_ANNOTATION] for p in pods.values())
    assert roles == Counter(master=shards, replica=shards * (MEMBERS - 1))


# -- two binders without leader election -----------------------------------------------------


def test_two_binders_started_without_leader_election_bind_each_pod_once_soundly(
    control_plane: ControlPlane, kube_api: ApiClient, namespace: str, run_id: str, tmp_path: Path
) -> None:
    create_nodes(kube_api, run_id)
    binders = [
        BinderProcess(
            control_plane, namespace, f"mistake-{i}", tmp_path / f"binder-{i}.log",
            leader_elect=False,
        )
        for i in range(2)
    ]  # fmt: skip
    shards = 15
    try:
        for binder in binders:
            binder.start()
        assert wait_for(lambda: all("binder run " in b.log() for b in binders), 60)

        def arrive() -> None:
            for shard in range(shards):
                create_shards(kube_api, namespace, run_id, range(shard, shard + 1))
                time.sleep(0.1)

        creator = threading.Thread(target=arrive)
        creator.start()
        creator.join(timeout=120)
        total = shards * MEMBERS
        assert wait_for(lambda: len(bound(kube_api, namespace)) == total, 120), "\n".join(
            b.log()[-3000:] for b in binders
        )
        time.sleep(3.0)  # a second binder acting late would show by now
        assert all(b.alive() for b in binders)
    finally:
        for binder in binders:
            binder.stop()
    pods = read_pods(kube_api, namespace)
    assert hard_violations(kube_api, namespace, run_id) == []
    decisions = Decisions.read(*(b.log() for b in binders))
    assert_planned(pods, decisions)
    # Each pod's Binding written by exactly one binder, once.
    assert {name: len(writes) for name, writes in decisions.written.items()} == dict.fromkeys(
        pods, 1
    )


# -- a node cordoned and another deleted mid-rollout -----------------------------------------


def test_nothing_is_bound_to_a_node_after_it_is_cordoned_or_deleted(
    control_plane: ControlPlane, kube_api: ApiClient, namespace: str, run_id: str, tmp_path: Path
) -> None:
    """The first shards placed, the emptiest nodes (where the next ones would go) are cordoned
    and deleted while the rest arrive and are being planned: nothing lands there after."""
    names = create_nodes(kube_api, run_id)
    binder = BinderProcess(control_plane, namespace, "node-binder", tmp_path / "binder.log")
    core = CoreV1Api(kube_api)
    first, rest = 6, 10
    total = (first + rest) * MEMBERS
    try:
        binder.start()
        create_shards(kube_api, namespace, run_id, range(first))
        assert wait_for(lambda: len(bound(kube_api, namespace)) == first * MEMBERS, 60)
        load = Counter(bound(kube_api, namespace).values())
        cordoned, deleted = sorted(names, key=lambda n: (load[n], n))[:2]

        def arrive() -> None:
            for shard in range(first, first + rest):
                create_shards(kube_api, namespace, run_id, range(shard, shard + 1))
                time.sleep(0.5)

        creator = threading.Thread(target=arrive)
        creator.start()
        time.sleep(0.6)  # the second wave has begun: its first shards are being planned
        json_of(
            core.patch_node(
                cordoned,
                {"spec": {"unschedulable": True}},
                _content_type="application/merge-patch+json",
                _preload_content=False,
            )
        )
        json_of(core.delete_node(deleted, _preload_content=False))
        time.sleep(1.5)  # Bindings in flight land, the binder's node watch sees both changes
        before = bound(kube_api, namespace)
        on_them = {p for p, n in before.items() if n in (cordoned, deleted)}
        creator.join(timeout=120)
        assert wait_for(lambda: len(bound(kube_api, namespace)) == total, 120), binder.log()[-4000:]
    finally:
        binder.stop()
    after = bound(kube_api, namespace)
    assert len(after) - len(before) >= 3 * MEMBERS  # the rollout went on after the changes
    assert {p for p, n in after.items() if n in (cordoned, deleted)} == on_them
    assert hard_violations(kube_api, namespace, run_id) == []
    assert_planned(read_pods(kube_api, namespace), Decisions.read(binder.log()))
