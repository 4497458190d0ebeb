"""Day two on real Redis: the guarantee kept after failures, for the deployments people run.

On the real control plane, 24 nodes in 3 zones: a deployment (the bitnami chart, 6 shards x 1,
over TLS with the chart's password and certificates; the OT operator, 3 leaders and 3 followers,
with a password) is installed with its own ``deploy/profiles/NAME`` (RBAC, admission policy,
policy), its pods placed by the binder running as deployed, a real redis-server behind each pod,
the cluster formed as the deployment forms it, a client writing all along with ``WAIT 1``. Then:

1. a zone is lost: the cluster serves again, and no acknowledged write is lost;
2. the zone returns: its servers rejoin as replicas, masters now piled into two zones;
3. the profile's CronJob, run as deployed (its command, arguments and ServiceAccount, against
   the real API server and the real Redis), restores every shard and the master majority
   against any one zone's loss in one run, with failovers;
4. a second zone, another one, is lost: survived too, no acknowledged write lost;
5. a node that hosts a master is drained: the per-shard budgets hold, the binder places the
   replacement, and afterwards (one CronJob run) any one zone's loss is survived.

The same deployments under the stock scheduler alone are measured beside it (printed).
Figures go to $E2E_REPORT_DIR/day-two-NAME.json when that is set.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import time
from collections.abc import Iterator
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import pytest
from kubernetes.client import ApiClient, AppsV1Api, CoreV1Api

from models.policy import Policy
from placer.binder.config import PLACEMENT_GATE
from tests import operator_shapes as shapes
from tests.e2e import install
from tests.e2e.control_plane import ControlPlane, free_port, json_of
from tests.e2e.day_two import Scene, master_node, ordinal_ips, wait_servers, writing
from tests.e2e.formation import (
    add_followers,
    create_order,
    leaders_then_followers,
    wait_until,
)
from tests.e2e.kubelet import KubeletStandIn
from tests.e2e.redis_pods import RedisPods
from tests.e2e.test_profiles_e2e import RUN_LABEL, create_nodes
from tests.redis_servers import RedisSecurity, redis_binaries_missing
from tests.tls_material import make_authority, write_leaf

pytestmark = pytest.mark.e2e

READY_WITHIN = 120.0


@dataclass(frozen=True)
class Case:
    profile: str
    tls: bool
    shards: int


CASES = {
    "bitnami": Case("bitnami", tls=True, shards=6),
    "ot-operator": Case("ot-operator", tls=False, shards=3),
}


def _statefulsets(
    case: Case, run_id: str, password_secret: str, tls_secret: str
) -> list[list[Any]]:
    """The deployment's StatefulSets in creation waves, with its credentials as its templates
    hand them to Redis."""
    selector = {RUN_LABEL: run_id}
    if case.profile == "bitnami":
        waves = [shapes.bitnami("orders", nodes=2 * case.shards, node_selector=selector)]
        deployment = "bitnami"
    else:
        leader, follower = shapes.ot_operator(
            "cache", leaders=case.shards, followers=case.shards, node_selector=selector
        )
        waves = [[leader], [follower]]
        deployment = "ot-operator"
    for wave in waves:
        for sts in wave:
            shapes.with_password(sts, deployment, password_secret, "password")
            if case.tls:
                shapes.with_tls(sts, deployment, tls_secret)
    return waves


def _create_secret(api: ApiClient, namespace: str, name: str, data: dict[str, bytes]) -> None:
    import base64

    body = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": name, "namespace": namespace},
        "data": {k: base64.b64encode(v).decode() for k, v in data.items()},
    }
    json_of(CoreV1Api(api).create_namespaced_secret(namespace, body, _preload_content=False))  # type: ignore[arg-type]


def _ready_problem(api: ApiClient, namespace: str, count: int) -> str | None:
    ready = _ready(api, namespace)
    return None if ready >= count else f"{ready} of {count} pods Ready"


def _ready(api: ApiClient, namespace: str) -> int:
    pods = json_of(CoreV1Api(api).list_namespaced_pod(namespace, _preload_content=False))
    return sum(
        1
        for p in pods.get("items") or []
        if any(
            c.get("type") == "Ready" and c.get("status") == "True"
            for c in (p.get("status") or {}).get("conditions") or []
        )
    )


@dataclass
class Installed:
    binder: install.Workload
    cronjob: install.Workload
    objects: list[dict[str, Any]]


def _install(
    plane: ControlPlane, api: ApiClient, profile: str, namespace: str, tmp: Path
) -> Installed:
    objects = install.for_namespace(install.render(f"profiles/{profile}"), namespace)
    install.install(plane, objects)  # removed by the test when it ends (install.uninstall)
    own = install.placer_namespace(namespace)
    policy_file = tmp / "policy.yaml"
    policy_file.write_text(install.policy_text(objects))
    binder_spec = install.container_of(objects, "Deployment")
    args = list(binder_spec["args"])
    if "--metrics-port" in args:  # a port of its own, as a pod has its own network
        args[args.index("--metrics-port") + 1] = str(free_port())
    binder_spec = {**binder_spec, "args": args}

    def kubeconfig(account: str) -> Path:
        return install.service_account_kubeconfig(
            plane, api, own, account, tmp / f"{account}.kubeconfig"
        )

    binder = install.workload(
        binder_spec, policy_file, kubeconfig("redis-placer-binder"), "binder-e2e", own
    )
    cronjob = install.workload(
        install.container_of(objects, "CronJob"),
        policy_file,
        kubeconfig("redis-placer-rebalance"),
        "rebalance-e2e",
        own,
    )
    labels = Policy.model_validate({"identity": {"profile": profile}}).selector
    install.wait_for_gating(api, namespace, labels, PLACEMENT_GATE)
    return Installed(binder=binder, cronjob=cronjob, objects=objects)


@contextlib.contextmanager
def _uninstalled_after(plane: ControlPlane, objects: list[dict[str, Any]]) -> Iterator[None]:
    try:
        yield
    finally:
        install.uninstall(plane, objects)


def _run_cronjob(scene: Scene, installed: Installed, what: str) -> dict[str, Any]:
    began = time.monotonic()
    done = installed.cronjob.run()
    seconds = time.monotonic() - began
    failovers = sum(
        1
        for line in done.stdout.splitlines()
        if line.strip().startswith("failover ") and ": ok" in line
    )
    relabels = sum(
        1
        for line in done.stdout.splitlines()
        if line.strip().startswith("relabel ") and ": ok" in line
    )
    facts = {
        "exit": done.returncode,
        "seconds": round(seconds, 1),
        "failovers": failovers,
        "relabels": relabels,
    }
    scene.note(f"cronjob {what}", **facts)
    print(done.stdout[-3000:])
    if done.stderr.strip():
        print("stderr:", done.stderr[-2000:])
    return {**facts, "stdout": done.stdout, "stderr": done.stderr}


def _security(case: Case, tmp: Path) -> tuple[RedisSecurity, dict[str, bytes] | None, str]:
    password = "pw-" + secrets.token_hex(8)
    tls = None
    tls_data = None
    if case.tls:
        tls = write_leaf(
            tmp / "tls",
            make_authority("orders-ca"),
            "orders-redis-cluster",
            dns=["*.orders-redis-cluster-headless.default.svc.cluster.local"],
        )
        tls_data = tls.read()
    return RedisSecurity(password=password, tls=tls, auth_clients=True), tls_data, password


@pytest.fixture
def redis_available() -> None:
    reason = redis_binaries_missing()
    if reason:
        pytest.skip(reason)


def _bring_up(
    case: Case,
    api: ApiClient,
    namespace: str,
    run_id: str,
    security: RedisSecurity,
    runtime: RedisPods,
    kubelet: KubeletStandIn,
) -> Scene:
    """The deployment's StatefulSets in their waves, each wave Ready, formed as it forms."""
    zone_of_node = {n: f"zone-{n.rsplit('-', 1)[1][0]}" for n in create_nodes(api, run_id)}
    scene = Scene(api, namespace, zone_of_node, runtime, kubelet, case.shards)
    waves = _statefulsets(case, run_id, "auth", "tls")
    apps = AppsV1Api(api)
    made = 0
    formed_leaders: list[str] = []
    for number, wave in enumerate(waves):
        for sts in wave:
            sts["metadata"]["namespace"] = namespace
            json_of(apps.create_namespaced_stateful_set(namespace, sts, _preload_content=False))
        made += sum(s["spec"]["replicas"] for s in wave)
        wait_until(partial(_ready_problem, api, namespace, made), READY_WITHIN, f"wave {number}")
        names = [f"{s['metadata']['name']}-{i}" for s in wave for i in range(s["spec"]["replicas"])]
        wait_servers(scene, names)
        if case.profile == "bitnami":
            create_order(runtime, ordinal_ips(scene, wave[0]["metadata"]["name"], len(names)), 1)
        elif number == 0:
            formed_leaders = ordinal_ips(scene, "cache-leader", case.shards)
            leaders_then_followers(runtime, formed_leaders)
        else:
            add_followers(
                runtime, formed_leaders, ordinal_ips(scene, "cache-follower", case.shards)
            )
    scene.note("formed", seconds=0, masters=scene.masters_per_zone())
    scene.wait_whole()
    return scene


@pytest.fixture
def report_dir() -> Path | None:
    folder = os.environ.get("E2E_REPORT_DIR")
    return Path(folder) if folder else None


def _save(report_dir: Path | None, name: str, scene: Scene, extra: dict[str, Any]) -> None:
    if report_dir is None:
        return
    report_dir.mkdir(parents=True, exist_ok=True)
    (report_dir / f"{name}.json").write_text(json.dumps({"log": scene.log, **extra}, indent=2))


@contextlib.contextmanager
def _environment(
    case: Case, api: ApiClient, namespace: str, tmp: Path
) -> Iterator[tuple[RedisSecurity, RedisPods, KubeletStandIn]]:
    security, tls_data, password = _security(case, tmp)
    _create_secret(api, namespace, "auth", {"password": password.encode()})
    if tls_data is not None:
        _create_secret(api, namespace, "tls", tls_data)
    runtime = RedisPods(tmp / "redis", security)
    try:
        with KubeletStandIn(api, namespace, runtime=runtime) as kubelet:
            yield security, runtime, kubelet
    finally:
        runtime.close()


def _zone_with_most_masters(scene: Scene, besides: str | None = None) -> str:
    counts = scene.masters_per_zone()
    return max((z for z in counts if z != besides), key=lambda z: (counts[z], z))


def _lose_and_check(scene: Scene, zone: str, what: str) -> dict[str, Any]:
    before = scene.masters_per_zone()
    scene.writes_flow(acknowledged=100)  # acknowledged writes in every shard before the loss
    began = time.monotonic()
    scene.lose_zone(zone)
    serving = scene.wait_serving()
    scene.writes_flow()
    assert scene.writer is not None
    lost = scene.writer.lost()
    facts = {
        "zone": zone,
        "masters before": before,
        "serving again after s": round(serving, 1),
        "masters after": scene.masters_per_zone(),
        "acknowledged writes": len(scene.writer.acked),
        "acknowledged writes lost": len(lost),
    }
    scene.note(what, **facts)
    assert lost == [], f"{len(lost)} acknowledged writes lost, e.g. {lost[:5]}"
    facts["seconds"] = round(time.monotonic() - began, 1)
    return facts


@pytest.mark.parametrize("name", list(CASES))
def test_the_guarantee_is_kept_through_failures(
    controller_manager: ControlPlane,
    kube_api: ApiClient,
    namespace: str,
    run_id: str,
    tmp_path: Path,
    redis_available: None,
    report_dir: Path | None,
    name: str,
) -> None:
    case = CASES[name]
    if not controller_manager.scheduler_running:
        pytest.skip("needs kube-scheduler in KUBEBUILDER_ASSETS: it binds the ungated pods")
    installed = _install(controller_manager, kube_api, case.profile, namespace, tmp_path)
    results: dict[str, Any] = {}
    with (
        _uninstalled_after(controller_manager, installed.objects),
        installed.binder.running(tmp_path / "binder.log"),
        _environment(case, kube_api, namespace, tmp_path) as (_, runtime, kubelet),
    ):
        scene = _bring_up(case, kube_api, namespace, run_id, runtime.security, runtime, kubelet)
        assert all(not lost for lost in scene.losses().values()), scene.losses()
        with writing(scene, scene.ips()):
            first = _zone_with_most_masters(scene)
            results["first zone loss"] = _lose_and_check(scene, first, "zone lost")
            results["cronjob during the outage"] = _run_cronjob(
                scene, installed, "during the outage"
            )
            scene.wait_serving()

            scene.restore_zone(first)
            rejoined = scene.wait_whole()
            piled = scene.masters_per_zone()
            scene.note("zone back", zone=first, rejoined_after_s=round(rejoined, 1), masters=piled)
            results["after the return"] = {"masters": piled, "losses": scene.losses()}

            run = _run_cronjob(scene, installed, "after the return")
            assert run["exit"] == 0, run["stdout"] + run["stderr"]
            scene.wait_whole()
            restored = scene.losses()
            scene.note("restored", masters=scene.masters_per_zone(), losses=restored)
            assert all(not lost for lost in restored.values()), restored
            results["restore"] = {
                "failovers": run["failovers"],
                "seconds": run["seconds"],
                "masters": scene.masters_per_zone(),
            }

            second = _zone_with_most_masters(scene, besides=first)
            results["second zone loss"] = _lose_and_check(scene, second, "second zone lost")
            scene.restore_zone(second)
            scene.wait_whole()
            _run_cronjob(scene, installed, "after the second return")
            scene.wait_whole()
            assert all(not lost for lost in scene.losses().values()), scene.losses()

            drained = master_node(scene)
            evicted = scene.drain(drained)
            scene.note("drained", node=drained, evicted=evicted)
            wait_until(
                lambda: (
                    None
                    if _ready(kube_api, namespace) >= len(scene.runtime.pods)
                    and all(scene.runtime.alive(k) for k in scene.runtime.pods)
                    else "replacements not Ready"
                ),
                READY_WITHIN,
                "the drained pods' replacements",
            )
            scene.wait_whole()
            after_drain = _run_cronjob(scene, installed, "after the drain")
            assert after_drain["exit"] == 0, after_drain["stdout"] + after_drain["stderr"]
            scene.wait_whole()
            final = scene.losses()
            scene.note("after the drain", masters=scene.masters_per_zone(), losses=final)
            assert all(not lost for lost in final.values()), final
            moved_to = {
                p["metadata"]["name"]: p["spec"]["nodeName"]
                for p in scene.pods()
                if p["metadata"]["name"] in evicted
            }
            assert drained not in moved_to.values(), moved_to
            results["drain"] = {"node": drained, "evicted": evicted, "placed on": moved_to}
            assert scene.writer is not None
            assert scene.writer.lost() == []
            results["acknowledged writes"] = len(scene.writer.acked)
    _save(report_dir, f"day-two-{name}", scene, results)


@pytest.mark.parametrize("name", list(CASES))
def test_the_stock_scheduler_alone_through_zone_losses(
    controller_manager: ControlPlane,
    kube_api: ApiClient,
    namespace: str,
    run_id: str,
    tmp_path: Path,
    redis_available: None,
    report_dir: Path | None,
    name: str,
) -> None:
    """The same deployment without redis-placer: each zone lost in turn (and returned),
    measured, not judged."""
    case = CASES[name]
    results: dict[str, Any] = {}
    with _environment(case, kube_api, namespace, tmp_path) as (_, runtime, kubelet):
        scene = _bring_up(case, kube_api, namespace, run_id, runtime.security, runtime, kubelet)
        results["losses"] = scene.losses()
        survived = 0
        with writing(scene, scene.ips()) as writer:
            for zone in sorted(set(scene.zone_of_node.values())):
                scene.writes_flow(acknowledged=100)
                scene.lose_zone(zone)
                try:
                    seconds: float | None = scene.wait_serving()
                    survived += 1
                except Exception:
                    seconds = None
                unreadable = len(writer.lost())
                scene.restore_zone(zone)
                scene.wait_whole()
                lost = len(writer.lost())
                facts = {
                    "serving again after s": None if seconds is None else round(seconds, 1),
                    "acknowledged writes unreadable while it was down": unreadable,
                    "acknowledged writes lost once it was back": lost,
                }
                scene.note("zone lost", zone=zone, **facts)
                results[zone] = facts
        results["zones survived"] = survived
        print(f"\n{name} under the stock scheduler: {survived} of 3 zone losses survived")
    _save(report_dir, f"day-two-stock-{name}", scene, results)
