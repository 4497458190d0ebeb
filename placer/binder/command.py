"""``redis-placer binder``: the Permit-gate binder as a long-running process."""

import contextlib
import logging
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import click

from placer.binder.background import DEFAULT_QPS
from placer.binder.config import DEFAULT_SCHEDULER_QPS, SWITCH_INTERVAL
from placer.binder.loop import (
    DEFAULT_BATCH_SECONDS,
    DEFAULT_BINDER_TIME_LIMIT,
    DEFAULT_CONCURRENCY,
    DEFAULT_MAX_BATCH_PODS,
    DEFAULT_RELATIVE_GAP,
    PLACEMENT_GATE,
    Binder,
    BinderConfig,
)
from placer.commands.options import (
    context_option,
    fail,
    kubeconfig_option,
    time_limit_option,
)
from placer.inputs.files import read_policy
from placer.inputs.live import LIVE_ONLY, connect
from placer.metrics import Metrics, MetricsServer, Readiness

if TYPE_CHECKING:  # the guard is imported with --guard only
    from placer.maintenance.serve import RunningGuard

READY_CONDITION = "cluster"
"""/readyz answers 200 while the binder's view of the cluster is current (``cluster_readable``)."""
SERVER_CONDITION = "apiserver"
"""... and while the API server answers a read that reaches etcd: with etcd away the binder's
requests wait rather than fail, so its own view alone would stay "current"."""
SERVER_PROBE_S = 2.0


def follow_server_readiness(
    adapter: Any, readiness: Readiness, stop: threading.Event, lease: tuple[str, str]
) -> None:
    """Every 2 s, whether the API server reads the Lease (from etcd) into /readyz."""
    while True:
        readiness.set(SERVER_CONDITION, adapter.server_ready(*lease))
        if stop.wait(SERVER_PROBE_S):
            return


@click.command("binder", short_help="Place pending Redis pods, one whole shard at a time.")
@click.option(
    "--enforce",
    type=click.Choice(["bind", "gate"]),
    default="bind",
    show_default=True,
    help="bind: pods with schedulerName from the policy are bound through pods/binding. "
    f"gate: pods created with the scheduling gate {PLACEMENT_GATE} are pinned to their node "
    "by a required node affinity and ungated; kube-scheduler then binds them.",
)
@click.option("-p", "--policy", "policy_path", type=click.Path(dir_okay=False), help="Policy YAML.")
@click.option(
    "--metrics-port",
    type=click.IntRange(0, 65535),
    metavar="PORT",
    default=9090,
    show_default=True,
    help="Port of the /metrics, /healthz and /readyz server (0: any free port).",
)
@click.option(
    "--leader-elect/--no-leader-elect",
    default=True,
    show_default=True,
    help="Without leader election there is no standby: the binder takes the Lease only while "
    "it has pods to place, so two started by mistake never write at once.",
)
@click.option(
    "--lease-namespace",
    envvar="POD_NAMESPACE",
    default="redis-placer",
    show_default=True,
    help="Namespace of the Lease that elects one binder (env POD_NAMESPACE: the binder's own).",
)
@click.option(
    "--lease-name",
    default="redis-placer-binder",
    show_default=True,
    help="Name of that Lease: of the binders that share it, only its holder places pods.",
)
@click.option("-n", "--namespace", default=None, help="Watch one namespace (default: all).")
@context_option
@kubeconfig_option
@time_limit_option(
    default=DEFAULT_BINDER_TIME_LIMIT,
    minimum=0.1,
    help="Seconds per batch solve. The gate holds pods while it solves, so this is shorter "
    "than the policy's solver.timeLimitSeconds (used by plan and rebalance); the plan is the "
    "best found in time, never worse than the greedy baseline it starts from.",
)
@click.option(
    "--solver",
    type=click.Choice(["cp-sat", "greedy"]),
    default="cp-sat",
    show_default=True,
    help="greedy: place each shard in turn, no optimisation (faster, for very large batches).",
)
@click.option(
    "--relative-gap",
    type=click.FloatRange(min=0.0, max=0.99),
    default=DEFAULT_RELATIVE_GAP,
    show_default=True,
    help="A batch's CP-SAT solve stops once its placement is proven within this share of the "
    "best possible (the policy's solver.relativeGap is for plan and rebalance).",
)
@click.option(
    "--concurrency",
    type=click.IntRange(min=1, max=256),
    default=DEFAULT_CONCURRENCY,
    show_default=True,
    help="Shards bound (or pinned) at once, one request in flight each.",
)
@click.option(
    "--batch-seconds",
    type=click.FloatRange(min=0.05),
    default=DEFAULT_BATCH_SECONDS,
    show_default=True,
    help="How long one batch's solve should take: batches grow or shrink with the solver's "
    "measured seconds per pod, and the next batch is solved while the last one is bound.",
)
@click.option(
    "--max-batch-pods",
    type=click.IntRange(min=1),
    default=DEFAULT_MAX_BATCH_PODS,
    show_default=True,
    help="The largest batch, in pending pods (whole shards are kept together).",
)
@click.option(
    "--event-qps",
    type=click.FloatRange(min=0.1),
    default=DEFAULT_QPS,
    show_default=True,
    help="Events and role labels per second, written in the background (slower while "
    "bindings are in flight).",
)
@click.option(
    "--manage-pdbs/--no-manage-pdbs",
    default=False,
    show_default=True,
    help="Create a PodDisruptionBudget (minAvailable: shard size - 1) for each shard placed and delete it "
    "with the shard; needs the RBAC of deploy/components/manage-pdbs.",
)
@click.option(
    "--recreate-refused/--no-recreate-refused",
    default=False,
    show_default=True,
    help="Gate mode: when kube-scheduler refuses a pin, delete that never-started pod so its "
    "controller recreates it, and place it elsewhere (a pin cannot move once the gate is "
    "lifted); needs the RBAC of deploy/components/recreate-refused.",
)
@click.option(
    "--scheduler-qps",
    type=click.FloatRange(min=1.0),
    default=DEFAULT_SCHEDULER_QPS,
    show_default=True,
    help="Gate mode: how many pins kube-scheduler binds a second (its --kube-api-qps): the "
    "next batch is pinned before those it holds run out, and the first shards go at once.",
)
@click.option(
    "--guard/--no-guard",
    default=False,
    show_default=True,
    help="Run the maintenance guard: an admission webhook that holds evictions and deletes of "
    "Redis pods while a master hands its role over or its shard has no other serving member "
    "(let through after --max-hold-seconds), and on the leader the handovers themselves; "
    "needs deploy/components/guard.",
)
@click.option(
    "--webhook-port",
    type=click.IntRange(1, 65535),
    default=9443,
    show_default=True,
    help="With --guard: the HTTPS port of the admission webhook.",
)
@click.option(
    "--max-hold-seconds",
    type=click.FloatRange(min=1.0),
    default=120.0,
    show_default=True,
    help="With --guard: the longest an eviction or delete is held; then it is let through "
    "with a warning and an Event, whatever Redis says.",
)
@click.option(
    "--redis-port",
    type=int,
    default=None,
    help="With --guard: Redis port of the pods (default: policy redis.port, 6379).",
)
def command(
    enforce: str,
    policy_path: str | None,
    metrics_port: int,
    leader_elect: bool,
    lease_namespace: str,
    lease_name: str,
    namespace: str | None,
    context: str | None,
    kubeconfig: str | None,
    time_limit: float,
    solver: str,
    relative_gap: float,
    concurrency: int,
    batch_seconds: float,
    max_batch_pods: int,
    event_qps: float,
    manage_pdbs: bool,
    recreate_refused: bool,
    scheduler_qps: float,
    guard: bool,
    webhook_port: int,
    max_hold_seconds: float,
    redis_port: int | None,
) -> None:
    """Hold pending Redis pods until their shard is whole, solve the batch, and place it."""
    from placer.kube.adapter import process_identity
    from placer.kube.leader import (
        LEASE_REQUEST_TIMEOUT,
        ApiLeaseClient,
        LeaderElector,
        LeaseError,
        LeaseOnDemand,
        LeaseUnusable,
        lease_api_client,
    )

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    sys.setswitchinterval(SWITCH_INTERVAL)  # the decision thread among the writing ones
    policy = read_policy(policy_path)
    # every request in flight holds a connection: the writes, both watches, the Lease
    adapter = connect(kubeconfig, context, pool_size=concurrency + 8, instead=LIVE_ONLY)
    client = adapter.api_client
    try:  # a Lease no round could ever use is a start-up error, not a silent standby
        ApiLeaseClient(client, lease_namespace, lease_name).probe()
    except LeaseUnusable as exc:
        fail(f"--lease-namespace {lease_namespace}: {exc}")
    except LeaseError as exc:  # the server did not answer: the campaign retries
        logging.getLogger(__name__).warning("lease check: %s", exc)
    metrics = Metrics()
    config = BinderConfig(
        enforce=enforce,  # type: ignore[arg-type]
        namespace=namespace,
        solver=solver,  # type: ignore[arg-type]
        time_limit=time_limit,
        relative_gap=relative_gap,
        concurrency=concurrency,
        batch_seconds=batch_seconds,
        max_batch_pods=max_batch_pods,
        event_qps=event_qps,
        manage_pdbs=manage_pdbs,
        recreate_refused=recreate_refused,
        scheduler_qps=scheduler_qps,
    )
    binder = Binder(adapter, policy, config, metrics)
    guard_settings = {
        "webhook_port": webhook_port,
        "namespace": lease_namespace,
        "max_hold_s": max_hold_seconds,
        "redis_port": redis_port,
    }
    stop = threading.Event()

    def on_signal(*_: Any) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    leading = threading.Event()
    identity = process_identity()
    logging.getLogger(__name__).info(
        "binder run %s: identity %s, lease %s/%s, leader election %s",
        binder.run_id,
        identity,
        lease_namespace,
        lease_name,
        "on" if leader_elect else "off (the Lease is taken while binding)",
    )

    def started_leading() -> None:
        leading.set()
        metrics.leader.set(1)

    def stopped_leading() -> None:
        leading.clear()
        metrics.leader.set(0)

    elector = LeaderElector(
        ApiLeaseClient(
            lease_api_client(client),
            lease_namespace,
            lease_name,
            request_timeout=LEASE_REQUEST_TIMEOUT,
        ),
        identity,
        namespace=lease_namespace,
        name=lease_name,
    )
    readiness = Readiness(READY_CONDITION, SERVER_CONDITION)
    binder.readable_listeners.append(lambda ok: readiness.set(READY_CONDITION, ok))
    threading.Thread(
        target=follow_server_readiness,
        args=(adapter, readiness, stop, (lease_namespace, lease_name)),
        name="apiserver-readiness",
        daemon=True,
    ).start()
    # The API server answers again: the Lease is tried at once, not after its period.
    binder.readable_listeners.append(lambda ok: elector.poke() if ok else None)
    if leader_elect:
        lease = threading.Thread(
            target=elector.run,
            args=(started_leading, stopped_leading, stop),
            name="leader-election",
            daemon=True,
        )
        lease.start()
        # is_leader, not only the callbacks: it lapses at the renew deadline even while a
        # renewal is still waiting for the server.
        leads = lambda: leading.is_set() and elector.is_leader  # noqa: E731
        with (
            MetricsServer(metrics, port=metrics_port, readiness=readiness),
            _guarded(guard, binder, metrics, stop, leads, **guard_settings),
        ):
            binder.run(stop, leading=leads)
        lease.join(timeout=5)  # the Lease is released, so a standby takes over at once
        return
    on_demand = LeaseOnDemand(elector)
    lease = threading.Thread(target=on_demand.run, args=(stop,), name="lease", daemon=True)
    lease.start()
    with (
        MetricsServer(metrics, port=metrics_port, readiness=readiness),
        # without leader election there is no standby: this guard acts
        _guarded(guard, binder, metrics, stop, lambda: True, **guard_settings),
    ):
        binder.run(stop, leading=lambda: on_demand.held, want_lease=on_demand.want)
    lease.join(timeout=5)


@contextlib.contextmanager
def _guarded(
    on: bool,
    binder: Binder,
    metrics: Metrics,
    stop: threading.Event,
    leading: Callable[[], bool],
    **settings: Any,
) -> Iterator["RunningGuard | None"]:
    """The maintenance guard beside the binder, with ``--guard`` (its ``RunningGuard``, else
    None). It reads nodes, pods and StatefulSets from the binder's watch cache, which both
    replicas follow, and lists them only while that cache is unreadable."""
    if not on:
        yield None
        return
    from placer.binder.shared import CachedObjects
    from placer.kube.source import ListedObjects
    from placer.maintenance.serve import GuardSettings, running_guard

    adapter = binder.adapter
    objects = CachedObjects(
        binder.cache, ListedObjects(adapter), binder.config.node_refresh_seconds
    )
    guard_settings = GuardSettings(**settings)
    with running_guard(
        adapter, binder.policy, metrics, guard_settings, stop, leading, objects
    ) as running:
        yield running
