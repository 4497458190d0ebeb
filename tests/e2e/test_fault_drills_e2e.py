"""Fault drills on the real control plane: the platform fails around the binder and rebalance.

The binder runs as deployed (``python -m placer.cli binder --leader-elect``, its default
solver budget) against this module's own etcd + kube-apiserver (+ kube-scheduler), which the
drills stop and start in place; a rollout of 600 pods (200 shards x 3, no roles: the solver
picks each master) keeps arriving through every fault, as a controller's would. Each drill
reads the binder's /readyz and /metrics every 0.1 s, as a readiness probe and Prometheus do.

1. kube-apiserver stopped 20 s mid-rollout, bind mode and gate mode;
2. etcd stopped 10 s mid-rollout;
3. two replicas on one Lease, the leader SIGKILLed mid-rollout;
4. every watch expired (410 Gone, etcd compacted under an API server without a watch cache)
   mid-rollout;
5. a Redis pod's server stopped (SIGSTOP) while rebalance reads roles (real redis-server);
6. rebalance killed between two failovers, a client writing with ``WAIT 1`` all along.

Each prints one ``DRILL`` line with what it measured (docs/benchmarks.md has them).
"""

from __future__ import annotations

import contextlib
import secrets
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes.client import ApiClient, CoreV1Api

from models.kube_objects import build_snapshot
from placer.kube.adapter import KubernetesAdapter
from solver.check import audit
from tests.e2e.control_plane import (
    SKIP_REASON,
    ControlPlane,
    create_namespace,
    create_node,
    find_assets,
    free_port,
    json_of,
)
from tests.e2e.fault_drills import (
    BOUND,
    DRILL_LABEL,
    EXPIRED_NODES,
    EXPIRED_PODS,
    LEADER,
    MEMBERS,
    POLICY,
    UNREADABLE,
    Outcome,
    Probe,
    Rollout,
    wait_for,
)
from tests.e2e.test_binder_crash_e2e import BinderProcess, Decisions, assert_planned

pytestmark = pytest.mark.e2e

SHARDS = 200
"""600 pods: the rollout the drills run through."""
TRIGGER = 150
"""Pods placed when the fault strikes: a quarter of the rollout."""
RESUME_TARGET_S = 5.0
"""The binder places again within this of the API server's (or etcd's) return: the target,
measured and reported (docs/benchmarks.md), never what the test holds it to."""
RESUME_WITHIN_S = 6 * RESUME_TARGET_S
"""What the test holds it to: a binder that waits out a backoff or a stale Lease misses it
whatever the load; a loaded 2-core machine alone does not."""
LEASE_DURATION_S = 15.0
"""The binder's Lease (placer.kube.leader.LeaderConfig): a standby places within it + 2 s
(the target, reported); the test holds it to twice the Lease, which a standby that waited for
the Lease to expire a second time would miss."""
PLACED_WITHIN_S = 300.0
"""Generous: the whole rollout placed after the fault, on a loaded 2-core machine."""
ZONES, RACKS, PER_RACK = 3, 4, 18
"""216 nodes: room for 200 masters at one per node (the default maxMastersPerNode)."""


# -- the control plane of this module, and its nodes -----------------------------------------


@pytest.fixture(scope="module")
def plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    """A control plane of this module's own: the drills stop its parts."""
    assets = find_assets()
    if assets is None:
        pytest.skip(SKIP_REASON)
    control = ControlPlane(assets, tmp_path_factory.mktemp("fault-plane"))
    control.start()
    try:
        yield control
    finally:
        control.stop()


@pytest.fixture(scope="module")
def api(plane: ControlPlane) -> Iterator[ApiClient]:
    client = plane.api_client()
    yield client
    client.close()


@pytest.fixture(scope="module")
def nodes(api: ApiClient) -> str:
    """The drills' nodes (8 cpu, 32 GiB), labelled with a run id that only their pods select."""
    run_id = secrets.token_hex(4)
    for z in range(ZONES):
        for r in range(RACKS):
            for i in range(PER_RACK):
                labels = {
                    POLICY.topology.zone: f"zone-{z}",
                    POLICY.topology.rack: f"rack-{z}-{r}",
                    DRILL_LABEL: run_id,
                }
                create_node(api, f"drill-{run_id}-{z}-{r}-{i}", labels, cpu="8", memory="32Gi")
    return run_id


@pytest.fixture
def namespace(api: ApiClient) -> Iterator[str]:
    """A namespace per drill; its pods are deleted at the end (they hold the nodes' room)."""
    name = f"drill-{secrets.token_hex(4)}"
    create_namespace(api, name)
    yield name
    with contextlib.suppress(Exception):
        json_of(
            CoreV1Api(api).delete_collection_namespaced_pod(
                name, grace_period_seconds=0, _preload_content=False
            )
        )


# -- reading the outcome ---------------------------------------------------------------------


def read_pods(api: ApiClient, namespace: str) -> dict[str, dict[str, Any]]:
    items = json_of(
        CoreV1Api(api).list_namespaced_pod(namespace, _preload_content=False, _request_timeout=30)
    )["items"]
    return {p["metadata"]["name"]: p for p in items}


def bound_count(api: ApiClient, namespace: str) -> int:
    return sum(1 for p in read_pods(api, namespace).values() if p["spec"].get("nodeName"))


def hard_violations(api: ApiClient, namespace: str, run_id: str) -> list[Any]:
    adapter = KubernetesAdapter(api, instance="drill-check")
    found = adapter.list_nodes(label_selector=f"{DRILL_LABEL}={run_id}")
    snapshot = build_snapshot([*found, *adapter.list_pods(namespace)], POLICY)
    return [v for v in audit(snapshot, POLICY) if v.severity == "hard"]


def double_writes(decisions: Decisions) -> dict[str, int]:
    """Pods whose Binding (or pin) a binder logged as its own write more than once."""
    return {pod: len(w) for pod, w in decisions.written.items() if len(w) > 1}


def binder(
    plane: ControlPlane, namespace: str, name: str, tmp_path: Path, enforce: str = "bind"
) -> tuple[BinderProcess, int]:
    """A binder process as deployed (leader election on, the default solver budget), with
    its metrics on a port of its own."""
    port = free_port()
    process = BinderProcess(
        plane,
        namespace,
        name,
        tmp_path / f"{name}.log",
        leader_elect=True,
        extra=("--enforce", enforce, "--metrics-port", str(port)),
    )
    return process, port


def wait_leading(probe: Probe, process: BinderProcess, timeout: float = 120.0) -> None:
    assert wait_for(
        lambda: probe.last().get(LEADER) == 1.0 and probe.last().ready is True, timeout
    ), f"the binder never led and was ready:\n{process.log()[-3000:]}"


def placed_everything(
    api: ApiClient, namespace: str, rollout: Rollout, processes: list[BinderProcess]
) -> None:
    assert wait_for(lambda: rollout.done.is_set(), PLACED_WITHIN_S, 0.5), (
        f"the rollout stopped at {rollout.created} pods"
    )
    assert wait_for(lambda: bound_count(api, namespace) == rollout.total, PLACED_WITHIN_S, 1.0), (
        f"{bound_count(api, namespace)}/{rollout.total} placed\n"
        + "\n".join(p.log()[-3000:] for p in processes)
    )


def judge(
    api: ApiClient,
    namespace: str,
    run_id: str,
    outcome: Outcome,
    processes: list[BinderProcess],
) -> None:
    """Every pod placed where the plan of its own batch put it, written once, no hard
    violation; the figures into ``outcome``."""
    pods = read_pods(api, namespace)
    decisions = Decisions.read(*(p.log() for p in processes))
    doubles = double_writes(decisions)
    hard = hard_violations(api, namespace, run_id)
    outcome["pods placed"] = f"{sum(1 for p in pods.values() if p['spec'].get('nodeName'))}"
    outcome["double bindings"] = len(doubles)
    outcome["hard violations"] = len(hard)
    print(outcome.line())
    assert doubles == {}
    assert hard == []
    assert_planned(pods, decisions)
    roles = Counter(p["metadata"]["annotations"].get("redis-placer.io/role") for p in pods.values())
    assert roles == Counter(master=SHARDS, replica=SHARDS * (MEMBERS - 1))


def readiness_figures(probe: Probe, down: float, back: float, outcome: Outcome) -> None:
    """When /readyz turned 503 after the fault began and 200 again after it ended."""
    gone = probe.first_after(down, lambda s: s.ready is False)
    again = probe.first_after(back, lambda s: s.ready is True)
    outcome["not ready after s"] = round(gone.at - down, 2) if gone else "never"
    outcome["ready again after s"] = round(again.at - back, 2) if again else "never"


def writes(api: ApiClient, namespace: str) -> bool:
    """Whether the API server takes a write now (a ConfigMap, within 1 s): it reaches etcd."""
    core = CoreV1Api(api)
    body: Any = {"metadata": {"name": "drill-write"}, "data": {"at": str(time.time())}}
    try:
        json_of(
            core.replace_namespaced_config_map(
                "drill-write", namespace, body, _preload_content=False, _request_timeout=1
            )
        )
    except Exception as exc:
        if getattr(exc, "status", None) != 404:
            return False
        json_of(
            core.create_namespaced_config_map(
                namespace, body, _preload_content=False, _request_timeout=1
            )
        )
    return True


def resumed_after(probe: Probe, back: float) -> float | None:
    """Seconds from ``back`` to the first pod the binder placed after it."""
    before = probe.between(0, back)
    placed = before[-1].get(BOUND) if before else 0.0
    first = probe.first_after(back, lambda s: s.get(BOUND) > placed)
    return None if first is None else first.at - back


# -- 1, 2: kube-apiserver or etcd stopped mid-rollout ----------------------------------------


@pytest.mark.parametrize(
    ("part", "enforce", "seconds"),
    [("kube-apiserver", "bind", 20.0), ("kube-apiserver", "gate", 20.0), ("etcd", "bind", 10.0)],
    ids=["apiserver-bind", "apiserver-gate", "etcd-bind"],
)
def test_the_rollout_goes_on_when_the_api_server_or_etcd_stops_and_returns(
    plane: ControlPlane,
    api: ApiClient,
    nodes: str,
    namespace: str,
    tmp_path: Path,
    part: str,
    enforce: str,
    seconds: float,
) -> None:
    if enforce == "gate" and not plane.scheduler_running:
        pytest.skip("gate mode needs kube-scheduler in KUBEBUILDER_ASSETS (it binds the pins)")
    outcome = Outcome(f"{part} stopped {seconds:g} s, {enforce} mode")
    process, port = binder(plane, namespace, f"outage-{enforce}", tmp_path, enforce)
    rollout = Rollout(api, namespace, "outage", nodes, enforce, SHARDS)
    with Probe(port) as probe:
        try:
            process.start()
            wait_leading(probe, process)
            rollout.start()
            assert wait_for(lambda: probe.bound() >= TRIGGER, PLACED_WITHIN_S), process.log()[
                -3000:
            ]
            outcome["placed at the fault"] = int(probe.bound())
            outcome["created at the fault"] = rollout.created
            down = time.time()  # SIGTERM: both stop listening at once
            if part == "etcd":
                plane.stop_etcd()
            else:
                plane.stop_apiserver(grace=5.0)  # a kubelet's SIGKILL after the grace period
            stopped = time.time()
            time.sleep(max(0.0, seconds - (stopped - down)))
            back = plane.start_etcd() if part == "etcd" else plane.start_apiserver()
            if part == "etcd":  # the API server serves again once it reaches etcd again
                etcd_back = back
                assert wait_for(lambda: writes(api, namespace), 120.0, 0.05)
                back = time.time()
                outcome["API server writes again after etcd s"] = round(back - etcd_back, 2)
            outcome["exit took s"] = round(stopped - down, 2)
            outcome["down s"] = round(back - down, 2)
            placed_everything(api, namespace, rollout, [process])
            alive = process.alive()
        finally:
            rollout.stop()
            process.stop()
    resumed = resumed_after(probe, back)
    outcome["resumed after s"] = round(resumed, 2) if resumed is not None else "never"
    readiness_figures(probe, down, back, outcome)
    outcome["unreadable (metric)"] = int(probe.answered().get(UNREADABLE))
    outcome["binder starts"] = process.starts
    judge(api, namespace, nodes, outcome, [process])
    assert alive and process.starts == 1  # no crash, no crash loop
    assert outcome.figures["placed at the fault"] < rollout.total  # the fault was mid-rollout
    # Within 5 s of the API server serving again (after etcd's return, once it reaches it).
    assert resumed is not None and resumed <= RESUME_WITHIN_S, outcome.line()
    # /readyz: ready again after the return, and (the API server gone) not ready meanwhile.
    assert outcome.figures["ready again after s"] != "never"
    if part == "kube-apiserver":
        assert outcome.figures["not ready after s"] != "never"


# -- 3: the leader SIGKILLed, the standby takes over -----------------------------------------


def test_the_standby_takes_over_within_the_lease_when_the_leader_is_killed_mid_rollout(
    plane: ControlPlane, api: ApiClient, nodes: str, namespace: str, tmp_path: Path
) -> None:
    outcome = Outcome("leader SIGKILLed, standby takes over")
    leader, leader_port = binder(plane, namespace, "replica-a", tmp_path)
    standby, standby_port = binder(plane, namespace, "replica-b", tmp_path)
    rollout = Rollout(api, namespace, "lease", nodes, "bind", SHARDS)
    with Probe(leader_port) as first, Probe(standby_port) as second:
        try:
            leader.start()
            wait_leading(first, leader)
            standby.start()
            assert wait_for(lambda: second.last().ready is True, 120.0), standby.log()[-3000:]
            rollout.start()
            assert wait_for(lambda: first.bound() >= TRIGGER, PLACED_WITHIN_S), leader.log()[-3000:]
            assert second.bound() == 0.0  # the standby has placed nothing
            killed = time.time()
            leader.kill()
            outcome["placed at the kill"] = int(first.last().get(BOUND))
            placed_everything(api, namespace, rollout, [leader, standby])
            alive = standby.alive()
        finally:
            rollout.stop()
            leader.stop()
            standby.stop()
    leads = second.first_after(killed, lambda s: s.get(LEADER) == 1.0)
    places = second.first_after(killed, lambda s: s.get(BOUND) > 0)
    outcome["standby leads after s"] = round(leads.at - killed, 2) if leads else "never"
    outcome["kill to next bind s"] = round(places.at - killed, 2) if places else "never"
    outcome["standby placed"] = int(second.answered().get(BOUND))
    judge(api, namespace, nodes, outcome, [leader, standby])
    assert alive and places is not None
    assert places.at - killed <= 2 * LEASE_DURATION_S, outcome.line()


# -- 4: every watch expired (410 Gone) mid-rollout -------------------------------------------


def test_every_watch_expired_mid_rollout_is_listed_again_and_every_pod_placed(
    plane: ControlPlane, api: ApiClient, nodes: str, namespace: str, tmp_path: Path
) -> None:
    """Without a watch cache the API server watches etcd itself, so a watch resumed from a
    version etcd has compacted away ends with 410 Gone. etcd is compacted to its head every
    0.2 s (a ConfigMap written first, so the head moves on), and the rollout's second half
    waits until both of the binder's watches (pods, nodes) have expired and been listed again.
    Three nodes are cordoned then: none of the second half may land there."""
    outcome = Outcome("every watch expired (410 Gone)")
    plane.stop_apiserver(grace=5.0)
    plane.start_apiserver(extra=("--watch-cache=false",))
    process, port = binder(plane, namespace, "expiry", tmp_path)
    half = SHARDS // 2
    second_half = threading.Event()

    def hold(shard: int) -> float:
        """The second half waits until both watches have expired (or 180 s)."""
        if shard == half:
            second_half.wait(180.0)
        return 0.0

    rollout = Rollout(
        api,
        namespace,
        "expiry",
        nodes,
        "bind",
        SHARDS,
        pause=hold,
    )
    compactions = 0
    stop_compacting = threading.Event()
    core = CoreV1Api(api)

    def compact() -> None:
        nonlocal compactions
        touch = 0
        while not stop_compacting.is_set():
            touch += 1
            with contextlib.suppress(Exception):
                body: Any = {"metadata": {"name": "drill-touch"}, "data": {"n": str(touch)}}
                if touch == 1:
                    json_of(
                        core.create_namespaced_config_map(namespace, body, _preload_content=False)
                    )
                else:
                    json_of(
                        core.replace_namespaced_config_map(
                            "drill-touch",
                            namespace,
                            body,
                            _preload_content=False,
                        )
                    )
                plane.etcd_compact()
                compactions += 1
            stop_compacting.wait(0.2)

    compactor = threading.Thread(target=compact, name="compactor", daemon=True)
    cordoned: list[str] = []
    placed: dict[str, Any] = {}
    try:
        with Probe(port) as probe:
            process.start()
            wait_leading(probe, process)
            compactor.start()
            began = time.time()
            rollout.start()
            assert wait_for(
                lambda: bound_count(api, namespace) == half * MEMBERS, PLACED_WITHIN_S, 1.0
            )
            # the binder's watches end every 30 s and resume from their last version: gone
            assert wait_for(
                lambda: (
                    probe.last().get(EXPIRED_PODS) >= 1 and probe.last().get(EXPIRED_NODES) >= 1
                ),
                150.0,
                0.5,
            ), process.log()[-3000:]
            expired_at = time.time()
            placed = read_pods(api, namespace)
            load = Counter(p["spec"]["nodeName"] for p in placed.values())
            names = sorted(
                n["metadata"]["name"]
                for n in KubernetesAdapter(api, instance="drill").list_nodes(
                    label_selector=f"{DRILL_LABEL}={nodes}"
                )
            )
            cordoned = sorted(names, key=lambda n: (load[n], n))[:3]  # where the next would go
            for name in cordoned:
                json_of(
                    core.patch_node(
                        name,
                        {"spec": {"unschedulable": True}},
                        _content_type="application/merge-patch+json",
                        _preload_content=False,
                    )
                )
            second_half.set()
            placed_everything(api, namespace, rollout, [process])
            alive = process.alive()
            last = probe.answered()
    finally:
        second_half.set()
        stop_compacting.set()
        compactor.join(timeout=10)
        rollout.stop()
        process.stop()
        for name in cordoned:
            with contextlib.suppress(Exception):
                json_of(
                    core.patch_node(
                        name,
                        {"spec": {"unschedulable": False}},
                        _content_type="application/merge-patch+json",
                        _preload_content=False,
                    )
                )
        plane.stop_apiserver(grace=5.0)
        plane.start_apiserver(extra=())
    outcome["compactions"] = compactions
    outcome["pod watch expired"] = int(last.get(EXPIRED_PODS))
    outcome["node watch expired"] = int(last.get(EXPIRED_NODES))
    outcome["both expired after s"] = round(expired_at - began, 2)
    on_cordoned = [  # of the second half: the first half's pods there stay
        n
        for n, p in read_pods(api, namespace).items()
        if p["spec"].get("nodeName") in cordoned and n not in placed
    ]
    outcome["placed on cordoned nodes after the cordon"] = len(on_cordoned)
    outcome["ready at the end"] = last.ready
    judge(api, namespace, nodes, outcome, [process])
    assert alive and process.starts == 1
    assert "pod watch expired" in process.log() and "node watch expired" in process.log()
    assert on_cordoned == []
    assert last.ready is True


# -- 5, 6: rebalance on real Redis -----------------------------------------------------------


REDIS_SHARDS = 3
RUN_BUDGET_S = 280.0
"""The CronJob's activeDeadlineSeconds (deploy/base/rebalance/cronjob.yaml)."""


class RedisScene:
    """3 shards x 2 on real redis-server processes, every master piled on one node (a hard
    violation of maxMastersPerNode 1): rebalance fixes it with two failovers, no move."""

    def __init__(self, plane: ControlPlane, api: ApiClient, namespace: str, run_id: str, tmp: Path):
        from tests.e2e.kubelet import KubeletStandIn
        from tests.e2e.redis_pods import RedisPods

        self.plane, self.api, self.namespace, self.tmp = plane, api, namespace, tmp
        self.cluster = f"drill-{secrets.token_hex(3)}"
        names = sorted(
            n["metadata"]["name"]
            for n in KubernetesAdapter(api, instance="drill").list_nodes(
                label_selector=f"{DRILL_LABEL}={run_id}"
            )
        )
        by_zone: dict[str, list[str]] = {}
        for name in names:
            by_zone.setdefault(name.split("-")[2], []).append(name)
        zones = sorted(by_zone)
        self.pile = by_zone[zones[0]][-1]  # every master here
        self.node_of: dict[str, str] = {}
        self.runtime = RedisPods(tmp / "redis")
        self.kubelet = KubeletStandIn(api, namespace, runtime=self.runtime)
        core = CoreV1Api(api)
        for shard in range(REDIS_SHARDS):
            for index, role in enumerate(("master", "replica")):
                name = f"{self.cluster}-{shard}-{index}"
                node = self.pile if role == "master" else by_zone[zones[1 + shard % 2]][-1 - shard]
                labels = {
                    **POLICY.selector,
                    POLICY.labels.cluster: self.cluster,
                    POLICY.labels.shard: str(shard),
                    POLICY.labels.role: role,
                }
                body = {
                    "apiVersion": "v1",
                    "kind": "Pod",
                    "metadata": {"name": name, "labels": labels},
                    "spec": {
                        "nodeName": node,
                        "terminationGracePeriodSeconds": 0,
                        "containers": [
                            {
                                "name": "redis",
                                "image": "redis:7.2",
                                "resources": {"requests": {"cpu": "100m", "memory": "256Mi"}},
                            }
                        ],
                    },
                }
                json_of(core.create_namespaced_pod(namespace, body, _preload_content=False))  # type: ignore[arg-type]
                self.node_of[name] = node

    def __enter__(self) -> RedisScene:
        from tests.e2e.formation import healthy, primaries_by_index, wait_until

        self.kubelet.__enter__()
        keys = [f"{self.namespace}/{n}" for n in self.node_of]
        wait_until(
            lambda: None if all(self.runtime.alive(k) for k in keys) else "servers starting",
            120.0,
            "every pod's redis-server",
        )
        shards = {
            str(s): [self.ip(f"{self.cluster}-{s}-0"), self.ip(f"{self.cluster}-{s}-1")]
            for s in range(REDIS_SHARDS)
        }
        primaries_by_index(self.runtime, shards)
        wait_until(lambda: healthy(self.runtime, self.ips(), REDIS_SHARDS), 120.0, "the cluster")
        return self

    def __exit__(self, *exc: object) -> None:
        self.kubelet.__exit__()
        self.runtime.close()

    def ip(self, name: str) -> str:
        return self.runtime.ip(f"{self.namespace}/{name}")

    def ips(self) -> list[str]:
        return [self.ip(n) for n in self.node_of]

    def masters(self) -> dict[str, str]:
        """Pod name -> node of each pod Redis reports master now (the first that answers)."""
        from tests.e2e.formation import topology

        top = topology(self.runtime, self.ips())
        return {n: self.node_of[n] for n in self.node_of if self.ip(n) in top.masters}

    def masters_by_every_node(self) -> set[tuple[str, ...]]:
        """Each live server's own view of who is master (one tuple per server)."""
        from tests.e2e.formation import topology

        return {tuple(sorted(topology(self.runtime, [ip]).masters)) for ip in self.ips()}

    def rebalance(self, log: Path) -> subprocess.Popen[bytes]:
        args = [
            sys.executable, "-m", "placer.cli", "rebalance",
            "--kubeconfig", str(self.plane.kubeconfig),
            "--apply", "--max-moves", "0", "--roles", "redis", "-o", "json",
        ]  # fmt: skip
        root = Path(__file__).resolve().parents[2]
        with log.open("ab") as out:
            return subprocess.Popen(
                args, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd=root,
                env={**__import__("os").environ, "NO_PROXY": "127.0.0.1,localhost"},
            )  # fmt: skip

    def run(self, log: Path, timeout: float = RUN_BUDGET_S) -> tuple[int, float]:
        started = time.monotonic()
        process = self.rebalance(log)
        try:
            code = process.wait(timeout=timeout)
        finally:
            if process.poll() is None:
                process.kill()
                process.wait(timeout=30)
        return code, time.monotonic() - started

    def events(self, pod: str) -> list[dict[str, Any]]:
        found = json_of(
            CoreV1Api(self.api).list_namespaced_event(
                self.namespace,
                field_selector=f"involvedObject.name={pod}",
                _preload_content=False,
            )
        )
        items: list[dict[str, Any]] = found.get("items") or []
        return items


def wait_whole(scene: RedisScene, timeout: float = 120.0) -> None:
    from tests.e2e.formation import healthy, wait_until

    wait_until(lambda: healthy(scene.runtime, scene.ips(), REDIS_SHARDS), timeout, "the cluster")


def redis_missing() -> str | None:
    from tests.redis_servers import redis_binaries_missing

    return redis_binaries_missing()


def test_a_redis_pod_that_does_not_answer_is_named_left_alone_and_fixed_by_the_next_run(
    plane: ControlPlane, api: ApiClient, nodes: str, namespace: str, tmp_path: Path
) -> None:
    if (missing := redis_missing()) is not None:
        pytest.skip(missing)
    outcome = Outcome("a Redis pod SIGSTOPped while rebalance reads roles")
    from tests.e2e.acked_writes import AckedWriter

    with RedisScene(plane, api, namespace, nodes, tmp_path) as scene:
        before = scene.masters()
        assert set(before.values()) == {scene.pile} and len(before) == REDIS_SHARDS
        silent = f"{scene.cluster}-0-1"  # shard 0's replica: a failover it could not make
        silent_ip = scene.ip(silent)
        with AckedWriter(scene.runtime, scene.ips()) as writer:
            process = scene.runtime.pods[f"{namespace}/{silent}"].proc
            assert process is not None
            process.send_signal(signal.SIGSTOP)
            try:
                code, took = scene.run(tmp_path / "run-1.log")
            finally:
                process.send_signal(signal.SIGCONT)
            first = (tmp_path / "run-1.log").read_text(errors="replace")
            after_first = scene.masters()
            wait_whole(scene)
            code2, took2 = scene.run(tmp_path / "run-2.log")
            wait_whole(scene)
            after = scene.masters()
            lost = writer.lost()
            acknowledged = len(writer.acked)
    events = scene.events(silent)
    outcome["run 1 s"] = round(took, 2)
    outcome["run 1 exit"] = code
    outcome["masters on the pile after run 1"] = sum(n == scene.pile for n in after_first.values())
    outcome["run 2 s"] = round(took2, 2)
    outcome["run 2 exit"] = code2
    outcome["masters on the pile after run 2"] = sum(n == scene.pile for n in after.values())
    outcome["writes acknowledged"] = acknowledged
    outcome["writes lost"] = len(lost)
    outcome["events on the silent pod"] = sorted({e["reason"] for e in events})
    print(outcome.line())
    assert took < RUN_BUDGET_S
    # Named, in the log and in an Event on the pod.
    assert f"{namespace}/{silent}" in first, first[-3000:]
    assert any(silent in (e.get("message") or "") or e["reason"] for e in events), events
    assert any(e["type"] == "Warning" for e in events), events
    # Nothing it could not read was changed: shard 0 kept its master, the silent pod its role.
    assert f"{scene.cluster}-0-0" in after_first and silent not in after_first
    assert silent_ip  # (read while it answered)
    # The next run, with the pod back, restores what is due: one master per node and shard.
    assert code2 == 0, (tmp_path / "run-2.log").read_text()[-3000:]
    assert len(after) == REDIS_SHARDS and len(set(after.values())) == REDIS_SHARDS
    assert lost == []


def test_rebalance_killed_between_two_failovers_loses_nothing_and_the_next_run_finishes(
    plane: ControlPlane, api: ApiClient, nodes: str, namespace: str, tmp_path: Path
) -> None:
    if (missing := redis_missing()) is not None:
        pytest.skip(missing)
    outcome = Outcome("rebalance SIGKILLed between two failovers")
    from tests.e2e.acked_writes import AckedWriter

    with RedisScene(plane, api, namespace, nodes, tmp_path) as scene:
        before = scene.masters()
        assert set(before.values()) == {scene.pile} and len(before) == REDIS_SHARDS
        with AckedWriter(scene.runtime, scene.ips()) as writer:
            started = time.monotonic()
            process = scene.rebalance(tmp_path / "run-1.log")
            try:
                # the first failover done (a master off the pile), the second not yet
                moved = wait_for(
                    lambda: sum(n == scene.pile for n in scene.masters().values()) < REDIS_SHARDS,
                    RUN_BUDGET_S,
                    0.02,
                )
                if process.poll() is None:
                    process.send_signal(signal.SIGKILL)
                process.wait(timeout=30)
            finally:
                if process.poll() is None:
                    process.kill()
                    process.wait(timeout=30)
            killed_after = time.monotonic() - started
            assert moved
            killed_at = scene.masters()
            wait_whole(scene)
            views = scene.masters_by_every_node()
            code2, took2 = scene.run(tmp_path / "run-2.log")
            wait_whole(scene)
            after = scene.masters()
            lost = writer.lost()
            acknowledged = len(writer.acked)
    first = (tmp_path / "run-1.log").read_text(errors="replace")
    outcome["killed after s"] = round(killed_after, 2)
    outcome["exit of the killed run"] = process.returncode
    outcome["masters on the pile at the kill"] = sum(n == scene.pile for n in killed_at.values())
    outcome["run 2 s"] = round(took2, 2)
    outcome["masters on the pile after run 2"] = sum(n == scene.pile for n in after.values())
    outcome["writes acknowledged"] = acknowledged
    outcome["writes lost"] = len(lost)
    print(outcome.line())
    assert process.returncode == -signal.SIGKILL, first[-3000:]  # killed, not finished
    assert 1 <= outcome.figures["masters on the pile at the kill"] < REDIS_SHARDS
    # Every server agrees: one master per shard, none with two or none.
    assert len(views) == 1 and len(next(iter(views))) == REDIS_SHARDS, views
    assert code2 == 0, (tmp_path / "run-2.log").read_text()[-3000:]
    assert len(after) == REDIS_SHARDS and len(set(after.values())) == REDIS_SHARDS
    assert lost == [] and acknowledged > 0
