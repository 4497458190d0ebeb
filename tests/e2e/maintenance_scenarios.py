"""Planned disruptions run end to end on one deployment, with the maintenance guard or with no
tool at all, and what each did to the clients.

``run_profile`` brings a deployment up on the real control plane (its StatefulSets shaped as
its sources make them, with its chart's probes, preStop and grace period; a real redis-server
behind each pod; the cluster formed as the deployment forms it), starts one writer per shard
(``SET`` + ``WAIT 1``) and a poller, and then runs, in turn:

1. ``drain``: ``kubectl drain`` of a node that holds a master;
2. ``second drain``: two master nodes in two zones drained together, the second started while
   the first is under way;
3. ``guard killed`` (guarded only): a drain during which the guard's process is killed
   (SIGKILL); the drain must complete within its bounded wait;
4. ``rollout``: ``kubectl rollout restart`` of the StatefulSets (OT: both at once);
5. ``pool upgrade``: every node of the zone holding the most masters replaced in turn: a new
   node made, the old one cordoned, drained and deleted.

Guarded: the profile is installed from ``deploy/profiles/NAME`` as a user installs it (its
admission policy, RBAC, PodDisruptionBudgets), and the binder runs as deployed (``binder
--guard``, its own ServiceAccount); the guard's ValidatingWebhookConfiguration calls it at
``https://127.0.0.1:PORT/validate``, so the API server really asks it about every eviction and
delete. Stock: the same StatefulSets with no tool, placed by kube-scheduler alone.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

from kubernetes.client import ApiClient, AppsV1Api, CoreV1Api
from kubernetes.client.exceptions import ApiException

from models.policy import Policy
from placer.binder.config import PLACEMENT_GATE
from placer.kube.adapter import KubernetesAdapter
from tests import operator_shapes as shapes
from tests.e2e import install
from tests.e2e.control_plane import ControlPlane, free_port, json_of
from tests.e2e.formation import (
    add_followers,
    create_order,
    healthy,
    leaders_then_followers,
    primaries_by_index,
    wait_until,
)
from tests.e2e.kubelet import KubeletStandIn
from tests.e2e.maintenance import (
    CHARTS,
    NODE_TIMEOUT_MS,
    Drainer,
    DrainResult,
    Survival,
    Watch,
    Window,
    background,
    create_tls_secret,
    delete_node,
    force_delete_all,
    replace_node,
    rollout_done,
    rollout_restart,
    route_webhook,
    shards_of,
    webhook_material,
    with_grace,
    zone_survival,
)
from tests.e2e.redis_pods import RedisPods
from tests.e2e.test_profiles_e2e import RUN_LABEL, create_nodes
from tests.redis_servers import RedisSecurity
from tests.tls_material import make_authority, write_leaf

SETTLE_WITHIN_S = 420.0
RESTORE_WITHIN_S = 120.0
RELINK_AFTER_S = 60.0
KILLED_DRAIN_BOUND_S = 60.0
"""After the guard is killed a drain completes within this: the webhook fails open at once
(connection refused) or after its 5 s timeout, and kubectl retries every 5 s."""


@dataclass(frozen=True)
class Settings:
    """How the stand-in kubelet paces containers; the measuring run uses 2 s and 20 s."""

    start_delay_s: float = float(os.environ.get("MAINT_START_DELAY_S", "0.5"))
    attach_delay_s: float = float(os.environ.get("MAINT_ATTACH_DELAY_S", "2"))
    probe_scale: float = float(os.environ.get("MAINT_PROBE_SCALE", "0.4"))
    scenarios: tuple[str, ...] = tuple(
        os.environ.get(
            "MAINT_SCENARIOS", "drain,second drain,guard killed,rollout,pool upgrade"
        ).split(",")
    )


@dataclass(frozen=True)
class Shape:
    profile: str
    deployment: str
    shards: int
    tls: bool
    password: bool


SHAPES = {
    "bitnami": Shape("bitnami", "bitnami", 6, tls=True, password=True),
    "ot-operator": Shape("ot-operator", "ot-operator", 3, tls=False, password=True),
    "valkey-io": Shape("valkey-io", "valkey-io", 3, tls=False, password=False),
    "hyperspike": Shape("hyperspike", "hyperspike", 3, tls=False, password=True),
}


@dataclass
class Outcome:
    """One scenario, as the clients and the checker saw it."""

    scenario: str
    window: Window
    wall_s: float
    """The drain(s), the rollout or the upgrade: first request to the last pod gone (drains) or
    to the last new pod Ready (rollout)."""
    settle_s: float
    """Then until every pod is Ready and Redis whole again."""
    restore_s: float | None
    """Then until every zone's loss is survivable (None: not within RESTORE_WITHIN_S)."""
    evictions: int
    evicted_twice: list[str]
    refusals: int
    handovers: int
    survival_steps: list[str] = field(default_factory=list)
    """The checker's zone verdict after each step (each node of an upgrade)."""
    survival_end: str = ""
    survived_end: bool = False
    notes: dict[str, Any] = field(default_factory=dict)

    def row(self) -> dict[str, Any]:
        w = self.window
        return {
            "scenario": self.scenario,
            "longest outage s": round(w.longest_outage_s, 2),
            "outage per shard s": [round(w.outage_s[i], 1) for i in sorted(w.outage_s)],
            "cluster_state fail s (majority / any)": (
                round(w.fail_majority_s, 1),
                round(w.fail_any_s, 1),
            ),
            "shards with no running member": w.shards_without_a_member,
            "failovers": w.failovers,
            "handovers": self.handovers,
            "evictions": self.evictions,
            "evicted twice": self.evicted_twice,
            "429s": self.refusals,
            "wall s": round(self.wall_s, 1),
            "settle s": round(self.settle_s, 1),
            "zones survivable after s": None
            if self.restore_s is None
            else round(self.restore_s, 1),
            "end": self.survival_end,
            "replicas relinked": self.notes.get("replicas relinked", 0),
        }


@dataclass
class Report:
    profile: str
    guarded: bool
    settings: Settings
    outcomes: list[Outcome] = field(default_factory=list)
    acknowledged: int = 0
    lost: list[str] = field(default_factory=list)
    terminations: list[dict[str, Any]] = field(default_factory=list)
    no_member_events: int = 0

    def rows(self) -> list[dict[str, Any]]:
        return [o.row() for o in self.outcomes]

    def as_dict(self) -> dict[str, Any]:
        return {
            "profile": self.profile,
            "guarded": self.guarded,
            "settings": asdict(self.settings),
            "rows": self.rows(),
            "acknowledged": self.acknowledged,
            "lost": len(self.lost),
        }


# -- the deployment ------------------------------------------------------------------------------


def _statefulsets(shape: Shape, run_id: str) -> list[list[dict[str, Any]]]:
    selector = {RUN_LABEL: run_id}
    grace = CHARTS[shape.profile].grace_s
    if shape.profile == "bitnami":
        waves = [shapes.bitnami("orders", nodes=2 * shape.shards, node_selector=selector)]
    elif shape.profile == "ot-operator":
        leader, follower = shapes.ot_operator(
            "cache", leaders=shape.shards, followers=shape.shards, node_selector=selector
        )
        waves = [[leader], [follower]]
    elif shape.profile == "hyperspike":
        waves = [shapes.hyperspike("hs", shards=shape.shards, replicas=1, node_selector=selector)]
    else:
        waves = [shapes.valkey_io("vk", shards=shape.shards, replicas=1, node_selector=selector)]
    for wave in waves:
        for sts in wave:
            with_grace(sts, grace)
            if shape.password:
                shapes.with_password(sts, shape.deployment, "auth", "password")
            if shape.tls:
                shapes.with_tls(sts, shape.deployment, "tls")
    return waves


def _security(shape: Shape, tmp: Path) -> tuple[RedisSecurity, dict[str, bytes]]:
    import secrets

    password = "pw-" + secrets.token_hex(8) if shape.password else None
    tls = None
    secrets_data: dict[str, bytes] = {}
    if shape.tls:
        tls = write_leaf(
            tmp / "tls",
            make_authority("orders-ca"),
            "orders-redis-cluster",
            dns=["*.orders-redis-cluster-headless.default.svc.cluster.local"],
        )
    if password:
        secrets_data["password"] = password.encode()
    return RedisSecurity(password=password, tls=tls, auth_clients=bool(password)), secrets_data


def _create_secret(api: ApiClient, namespace: str, name: str, data: dict[str, bytes]) -> None:
    import base64

    body = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": name, "namespace": namespace},
        "data": {k: base64.b64encode(v).decode() for k, v in data.items()},
    }
    json_of(CoreV1Api(api).create_namespaced_secret(namespace, body, _preload_content=False))  # type: ignore[arg-type]


def _ready_count(api: ApiClient, namespace: str) -> int:
    pods = json_of(CoreV1Api(api).list_namespaced_pod(namespace, _preload_content=False))
    return sum(
        1
        for p in pods.get("items") or []
        if not p["metadata"].get("deletionTimestamp")
        and any(
            c.get("type") == "Ready" and c.get("status") == "True"
            for c in (p.get("status") or {}).get("conditions") or []
        )
    )


def _ready_problem(api: ApiClient, namespace: str, count: int) -> str | None:
    ready = _ready_count(api, namespace)
    return None if ready >= count else f"{ready} of {count} pods Ready"


def _ordinal_ips(runtime: RedisPods, namespace: str, sts: str, count: int) -> list[str]:
    return [runtime.ip(f"{namespace}/{sts}-{i}") for i in range(count)]


def _servers_up(runtime: RedisPods, keys: list[str]) -> str | None:
    missing = [k for k in keys if not runtime.alive(k)]
    return f"no server yet for {missing[:3]}" if missing else None


def _bring_up(
    shape: Shape, api: ApiClient, namespace: str, run_id: str, runtime: RedisPods
) -> tuple[dict[str, str], list[str]]:
    """Nodes, then the StatefulSets in their waves, each Ready and formed as the deployment
    forms it. Returns node -> zone and the StatefulSets' names."""
    zone_of_node = {n: f"zone-{n.rsplit('-', 1)[1][0]}" for n in create_nodes(api, run_id)}
    apps = AppsV1Api(api)
    made = 0
    names: list[str] = []
    leaders: list[str] = []
    for number, wave in enumerate(_statefulsets(shape, run_id)):
        for sts in wave:
            sts["metadata"]["namespace"] = namespace
            body: Any = sts
            json_of(apps.create_namespaced_stateful_set(namespace, body, _preload_content=False))
            names.append(sts["metadata"]["name"])
        made += sum(s["spec"]["replicas"] for s in wave)
        # hyperspike's probe passes only once the cluster is formed: it forms running pods.
        formed_first = shape.profile == "hyperspike"
        ready = partial(_ready_problem, api, namespace, made)
        if not formed_first:
            wait_until(ready, 300.0, f"wave {number} Ready")
        pods = [f"{s['metadata']['name']}-{i}" for s in wave for i in range(s["spec"]["replicas"])]
        keys = [f"{namespace}/{p}" for p in pods]
        wait_until(
            partial(_servers_up, runtime, keys),
            300.0 if formed_first else 120.0,
            "servers behind the pods",
        )
        if shape.profile == "bitnami":
            create_order(runtime, _ordinal_ips(runtime, namespace, names[0], len(pods)), 1)
        elif shape.profile == "ot-operator" and number == 0:
            leaders = _ordinal_ips(runtime, namespace, "cache-leader", shape.shards)
            leaders_then_followers(runtime, leaders)
        elif shape.profile == "ot-operator":
            add_followers(
                runtime, leaders, _ordinal_ips(runtime, namespace, "cache-follower", shape.shards)
            )
        elif shape.profile == "hyperspike":  # shard = ordinal mod shards, the first primary
            members = {
                str(shard): [
                    runtime.ip(f"{namespace}/hs-{shard + k * shape.shards}") for k in range(2)
                ]
                for shard in range(shape.shards)
            }
            primaries_by_index(runtime, members)
            wait_until(ready, 300.0, f"wave {number} Ready")
        else:
            members = {
                str(shard): [
                    runtime.ip(f"{namespace}/valkey-vk-{shard}-{node}-0") for node in range(2)
                ]
                for shard in range(shape.shards)
            }
            primaries_by_index(runtime, members)
    return zone_of_node, names


# -- the guard, as deployed ----------------------------------------------------------------------


@dataclass
class Guarded:
    """The profile installed, and the binder (with --guard) as a process that can be killed."""

    plane: ControlPlane
    objects: list[dict[str, Any]]
    command: list[str]
    env: dict[str, str]
    log: Path
    port: int
    proc: subprocess.Popen[bytes] | None = None
    starts: int = 0

    def start(self) -> None:
        self.starts += 1
        out = self.log.open("ab")
        self.proc = subprocess.Popen(
            self.command, env=self.env, stdout=out, stderr=subprocess.STDOUT
        )
        out.close()

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(timeout=30)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)

    def handovers(self) -> int:
        """Master roles the guard handed over so far (its log, one line each)."""
        text = self.log.read_text(errors="replace") if self.log.exists() else ""
        return text.count("guard: master role of shard")


def _install_guarded(
    plane: ControlPlane, api: ApiClient, profile: str, namespace: str, tmp: Path
) -> Guarded:
    objects = install.for_namespace(install.render(f"profiles/{profile}"), namespace)
    own = install.placer_namespace(namespace)
    port = free_port()
    material = webhook_material("redis-placer-webhook", own)
    route_webhook(objects, port, material["ca.crt"])
    install.install(plane, objects)
    create_tls_secret(api, own, "redis-placer-webhook-tls", material)
    policy_file = tmp / "policy.yaml"
    policy_file.write_text(install.policy_text(objects))
    spec = install.container_of(objects, "Deployment")
    args = list(spec["args"])
    assert "--guard" in args, f"the {profile} profile does not run the guard: {args}"
    if "--metrics-port" in args:
        args[args.index("--metrics-port") + 1] = str(free_port())
    args += ["--webhook-port", str(port)]
    kubeconfig = install.service_account_kubeconfig(
        plane, api, own, "redis-placer-binder", tmp / "binder.kubeconfig"
    )
    work = install.workload({**spec, "args": args}, policy_file, kubeconfig, "binder-e2e", own)
    labels = Policy.model_validate({"identity": {"profile": profile}}).selector
    install.wait_for_gating(api, namespace, labels, PLACEMENT_GATE)
    return Guarded(plane, objects, work.command, work.env, tmp / "binder.log", port)


def _wait_webhook(api: ApiClient, namespace: str, pod: str) -> None:
    """The API server asks the guard: a dry-run eviction of a master is refused by it."""
    core = CoreV1Api(api)
    body = {"metadata": {"name": pod, "namespace": namespace}}

    def refused() -> str | None:
        try:
            core.create_namespaced_pod_eviction(pod, namespace, body, dry_run="All")  # type: ignore[arg-type]
        except ApiException as exc:
            if exc.status == 429 and "redis-placer" in (exc.body or ""):
                return None
            return f"{exc.status}: {(exc.body or '')[:200]}"
        return "let through"

    wait_until(refused, 90.0, "the guard's webhook to answer the API server")


# -- one run ---------------------------------------------------------------------------------


class Run:
    """One deployment under one way of working (guarded or stock), scenario after scenario."""

    def __init__(
        self,
        plane: ControlPlane,
        api: ApiClient,
        shape: Shape,
        namespace: str,
        run_id: str,
        runtime: RedisPods,
        kubelet: KubeletStandIn,
        guarded: Guarded | None,
        policy: Policy,
    ) -> None:
        self.plane = plane
        self.api = api
        self.shape = shape
        self.namespace = namespace
        self.run_id = run_id
        self.runtime = runtime
        self.kubelet = kubelet
        self.guarded = guarded
        self.policy = policy
        self.adapter = KubernetesAdapter(api, instance="e2e-maintenance", request_timeout=15)
        self.drainer = Drainer(api, namespace)
        self.zone_of_node: dict[str, str] = {}
        self.statefulsets: list[str] = []
        self.watch: Watch | None = None
        self.replaced = 0
        self.relinked = 0
        """Replicas re-pointed at their master's new IP (``relink_stale_replicas``)."""
        self._unwhole_since: float | None = None

    # -- reading ---------------------------------------------------------------------------

    def pods(self) -> list[dict[str, Any]]:
        listed = json_of(
            CoreV1Api(self.api).list_namespaced_pod(self.namespace, _preload_content=False)
        )
        return list(listed.get("items") or [])

    def expected_pods(self) -> int:
        return self.shape.shards * 2

    def survival(self) -> Survival:
        return zone_survival(self.adapter, self.policy)

    def master_nodes(self) -> list[tuple[str, str]]:
        """(node, zone) of each pod Redis reports as master now."""
        from placer.maintenance.reading import read_guard_view

        view = read_guard_view(self.adapter, self.policy, port=6379)
        return sorted(
            (m.pod.node_name, self.zone_of_node.get(m.pod.node_name, "?"))
            for m in view.snapshot.members
            if m.role is not None and m.role.value == "master" and m.pod.node_name
        )

    def whole(self) -> str | None:
        pods = [p for p in self.pods() if not p["metadata"].get("deletionTimestamp")]
        if len(pods) < self.expected_pods():
            return f"{len(pods)} of {self.expected_pods()} pods"
        ready = _ready_count(self.api, self.namespace)
        if ready < self.expected_pods():
            return f"{ready} of {self.expected_pods()} Ready"
        ips = [p.ip for p in self.runtime.pods.values() if p.alive()]
        if len(ips) < self.expected_pods():
            return f"{len(ips)} servers up"
        return healthy(self.runtime, ips, self.shape.shards)

    def settle(self) -> float:
        began = time.monotonic()
        wait_until(self._whole_or_relinked, SETTLE_WITHIN_S, "every pod Ready and Redis whole")
        assert self.watch is not None
        self.watch.writes_flow()
        return time.monotonic() - began

    def _whole_or_relinked(self) -> str | None:
        """``whole``; after RELINK_AFTER_S of not whole, a replica still dialing its master's old
        IP (redis-server 7.0 does not always follow a restarted master's new address) is given
        ``CLUSTER REPLICATE`` of its master, as an operator's reconcile would, and it is noted."""
        problem = self.whole()
        if problem is None:
            self._unwhole_since = None
            return None
        now = time.monotonic()
        if self._unwhole_since is None:
            self._unwhole_since = now
        if now - self._unwhole_since > RELINK_AFTER_S:
            self._unwhole_since = now
            self.relinked += relink_stale_replicas(self.runtime)
        return problem

    def restored(self) -> float | None:
        """Seconds until every zone's loss is survivable again (the guard restores; stock is
        given the same time), None when it is not within RESTORE_WITHIN_S."""
        began = time.monotonic()
        while time.monotonic() - began < RESTORE_WITHIN_S:
            with contextlib.suppress(Exception):
                if self.survival().survived:
                    return time.monotonic() - began
            if self.guarded is None:
                return None  # no tool restores anything: judged once
            time.sleep(2.0)
        return None

    def handovers(self) -> int:
        return self.guarded.handovers() if self.guarded is not None else 0

    # -- scenarios -----------------------------------------------------------------------------

    def _outcome(
        self,
        scenario: str,
        window: Window,
        wall_s: float,
        drains: list[DrainResult],
        handovers_before: int,
        evictions_before: Counter[str],
        steps: list[str] | None = None,
        **notes: Any,
    ) -> Outcome:
        relinked_before = self.relinked
        settle_s = self.settle()
        assert self.watch is not None
        self.watch.end(window)
        restore_s = self.restored()
        end = self.survival()
        evictions = self.drainer.evictions - evictions_before
        outcome = Outcome(
            scenario=scenario,
            window=window,
            wall_s=wall_s,
            settle_s=settle_s,
            restore_s=restore_s,
            evictions=sum(evictions.values()),
            evicted_twice=sorted(n for n, c in evictions.items() if c > 1),
            refusals=sum(d.refusals for d in drains),
            handovers=self.handovers() - handovers_before,
            survival_steps=steps or [],
            survival_end=f"{end.text()} masters {dict(end.masters_per_zone)}"
            + ("" if end.survived else f"; failovers alone mend it: {end.mendable_by_failovers}"),
            survived_end=end.survived,
            notes={
                **notes,
                "drains": [_drain_facts(d) for d in drains],
                "layout": end.layout,
                "replicas relinked": self.relinked - relinked_before,
            },
        )
        print(f"  {self.shape.profile} {'guard' if self.guarded else 'stock'}: {outcome.row()}")
        return outcome

    def _begin(self) -> tuple[Window, int, Counter[str]]:
        assert self.watch is not None
        return self.watch.begin(), self.handovers(), Counter(self.drainer.evictions)

    def _uncordon_all(self) -> None:
        for node in self.zone_of_node:
            with contextlib.suppress(ApiException):
                self.drainer.uncordon(node)

    def drain(self) -> Outcome:
        node, _ = self.master_nodes()[0]
        window, handovers, evictions = self._begin()
        result = self.drainer.drain(node)
        assert result.completed, result.error
        outcome = self._outcome("drain", window, result.seconds, [result], handovers, evictions)
        self._uncordon_all()
        return outcome

    def second_drain(self) -> Outcome:
        masters = self.master_nodes()
        first_node, first_zone = masters[0]
        second_node = next(n for n, z in masters if z != first_zone)
        window, handovers, evictions = self._begin()
        began = time.monotonic()
        with background(lambda: self.drainer.drain(first_node)) as first:
            time.sleep(1.0)  # the first is under way
            second = self.drainer.drain(second_node)
        one = first[0]
        assert isinstance(one, DrainResult), one
        assert one.completed and second.completed, (one.error, second.error)
        wall = time.monotonic() - began
        outcome = self._outcome("second drain", window, wall, [one, second], handovers, evictions)
        self._uncordon_all()
        return outcome

    def guard_killed(self) -> Outcome:
        assert self.guarded is not None
        node, _ = self.master_nodes()[0]
        window, handovers, evictions = self._begin()
        killed_at: list[float] = []

        def kill_when_held() -> None:
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline and not self.drainer_refused(node):
                time.sleep(0.1)
            assert self.guarded is not None
            self.guarded.kill()
            killed_at.append(time.monotonic())

        with background(kill_when_held):
            result = self.drainer.drain(node)
        assert result.completed, result.error
        after_kill = result.ended - killed_at[0] if killed_at else None
        self.guarded.start()  # the Deployment brings it back
        outcome = self._outcome(
            "guard killed",
            window,
            result.seconds,
            [result],
            handovers,
            evictions,
            drain_after_kill_s=None if after_kill is None else round(after_kill, 1),
            held_before_kill=result.refusals,
        )
        self._uncordon_all()
        self.webhook_answers()  # the next scenario starts with the guard back, as a user's would
        return outcome

    def webhook_answers(self) -> None:
        """Until the API server asks the (restarted) guard again: a master's dry-run eviction is
        refused by it."""
        master = next(
            k
            for k, p in self.runtime.pods.items()
            if p.alive() and self.runtime.client(p.ip).info("replication").get("role") == "master"
        )
        _wait_webhook(self.api, self.namespace, master.split("/", 1)[1])

    def drainer_refused(self, node: str) -> bool:
        """The cordon is on and the guard holds (the node's master is being handed over)."""
        for pod in self.pods():
            annotations = pod["metadata"].get("annotations") or {}
            if (pod.get("spec") or {}).get("nodeName") == node and (
                "redis-placer.io/handover-requested" in annotations
            ):
                return True
        return False

    def rollout(self) -> Outcome:
        window, handovers, evictions = self._begin()
        began = time.monotonic()
        if self.shape.profile == "valkey-io":  # one StatefulSet per member: rolled in turn
            for name in self.statefulsets:
                rollout_restart(self.api, self.namespace, [name])
                wait_until(
                    partial(rollout_done, self.api, self.namespace, [name]),
                    SETTLE_WITHIN_S,
                    f"{name} rolled",
                )
        else:
            rollout_restart(self.api, self.namespace, self.statefulsets)
            time.sleep(1.0)
            wait_until(
                partial(rollout_done, self.api, self.namespace, self.statefulsets),
                SETTLE_WITHIN_S * 2,
                "the rollout",
            )
        wall = time.monotonic() - began
        return self._outcome("rollout", window, wall, [], handovers, evictions)

    def pool_upgrade(self) -> Outcome:
        counts = Counter(z for _, z in self.master_nodes())
        zone = max(sorted(counts), key=lambda z: counts[z])
        old = sorted(n for n, z in self.zone_of_node.items() if z == zone)
        window, handovers, evictions = self._begin()
        began = time.monotonic()
        drains: list[DrainResult] = []
        steps: list[str] = []
        for node in old:
            self.replaced += 1
            new = f"p-{self.run_id}-{node.rsplit('-', 1)[1]}-v{self.replaced}"
            replace_node(self.api, node, new)
            self.zone_of_node[new] = zone
            result = self.drainer.drain(node)
            assert result.completed, result.error
            drains.append(result)
            delete_node(self.api, node)
            del self.zone_of_node[node]
            with contextlib.suppress(Exception):
                survival = self.survival()
                steps.append(f"{node}: {survival.text()}")
        wall = time.monotonic() - began
        return self._outcome(
            "pool upgrade", window, wall, drains, handovers, evictions, steps, zone=zone
        )


def relink_stale_replicas(runtime: RedisPods) -> int:
    """Replicas whose link is down while dialing an address their master no longer has:
    ``CLUSTER REPLICATE`` of the same master (the node ID), so they dial its current IP."""
    import redis

    done = 0
    for pod in list(runtime.pods.values()):
        if not pod.alive():
            continue
        try:
            with runtime.client(pod.ip, timeout_s=1.0) as c:
                info = c.info("replication")
                if info.get("role") != "slave" or info.get("master_link_status") == "up":
                    continue
                mine = [
                    line.split()
                    for line in str(c.execute_command("CLUSTER", "NODES")).splitlines()
                    if "myself" in line
                ]
                master_id = mine[0][3] if mine else "-"
                nodes = str(c.execute_command("CLUSTER", "NODES")).splitlines()
                current = next(
                    (
                        ln.split()[1].split("@")[0].rsplit(":", 1)[0]
                        for ln in nodes
                        if ln.startswith(master_id)
                    ),
                    None,
                )
                if master_id != "-" and current and current != info.get("master_host"):
                    c.execute_command("CLUSTER", "REPLICATE", master_id)
                    done += 1
        except (redis.RedisError, OSError):
            continue
    return done


def _drain_facts(d: DrainResult) -> dict[str, Any]:
    return {
        "node": d.node,
        "seconds": round(d.seconds, 1),
        "evicted": d.evicted,
        "429s": d.refusals,
        "first messages": d.messages[:3],
    }


@contextlib.contextmanager
def deployment(
    plane: ControlPlane,
    profile: str,
    guarded: bool,
    namespace: str,
    run_id: str,
    tmp: Path,
    settings: Settings,
) -> Iterator[Run]:
    """The deployment up, formed, written to, with or without the guard; torn down after."""
    shape = SHAPES[profile]
    api = plane.api_client()
    guard: Guarded | None = None
    if guarded:
        guard = _install_guarded(plane, api, profile, namespace, tmp)
    security, secret_data = _security(shape, tmp)
    if secret_data:
        _create_secret(api, namespace, "auth", secret_data)
    if shape.tls:
        assert security.tls is not None
        _create_secret(api, namespace, "tls", security.tls.read())
    policy_text = install.policy_text(
        install.for_namespace(install.render(f"profiles/{profile}"), namespace)
    )
    import yaml

    policy = Policy.model_validate(yaml.safe_load(policy_text))
    runtime = RedisPods(tmp / "redis", security, node_timeout_ms=NODE_TIMEOUT_MS)
    lifecycle = CHARTS[profile].lifecycle(
        settings.start_delay_s, settings.attach_delay_s, settings.probe_scale
    )
    names: list[str] = []
    try:
        if guard is not None:
            guard.start()
        with KubeletStandIn(api, namespace, runtime=runtime, lifecycle=lifecycle) as kubelet:
            run = Run(plane, api, shape, namespace, run_id, runtime, kubelet, guard, policy)
            run.zone_of_node, names = _bring_up(shape, api, namespace, run_id, runtime)
            run.statefulsets = names
            wait_until(run.whole, SETTLE_WITHIN_S, "the deployment whole")
            if guard is not None:
                master = next(
                    k
                    for k, p in runtime.pods.items()
                    if p.alive()
                    and runtime.client(p.ip).info("replication").get("role") == "master"
                )
                _wait_webhook(api, namespace, master.split("/", 1)[1])
            shards = shards_of(runtime, [p.ip for p in runtime.pods.values()], 2)
            with Watch(runtime, shards) as watch:
                run.watch = watch
                watch.writes_flow()
                yield run
    finally:
        if guard is not None:
            guard.stop()
        force_delete_all(api, namespace, names)
        runtime.close()
        if guard is not None:
            install.uninstall(plane, guard.objects)
        api.close()


SCENARIOS = {
    "drain": Run.drain,
    "second drain": Run.second_drain,
    "guard killed": Run.guard_killed,
    "rollout": Run.rollout,
    "pool upgrade": Run.pool_upgrade,
}


def run_profile(
    plane: ControlPlane,
    profile: str,
    guarded: bool,
    namespace: str,
    run_id: str,
    tmp: Path,
    settings: Settings | None = None,
) -> Report:
    """Every scenario of ``settings`` in turn on one deployment; the report of each."""
    settings = settings or Settings()
    report = Report(profile, guarded, settings)
    with deployment(plane, profile, guarded, namespace, run_id, tmp, settings) as run:
        assert run.watch is not None
        for name in settings.scenarios:
            if name == "guard killed" and not guarded:
                continue
            report.outcomes.append(SCENARIOS[name](run))
        report.acknowledged = run.watch.acknowledged()
        report.lost = run.watch.lost()
        report.terminations = list(run.kubelet.terminations)
        report.no_member_events = len(run.watch.no_member_events)
    return report
