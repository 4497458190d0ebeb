"""``redis-placer binder``: the Permit-gate binder as a long-running process."""

import logging
import signal
import threading
from typing import Any

import click

from placer.binder.loop import DEFAULT_BINDER_TIME_LIMIT, PLACEMENT_GATE, Binder, BinderConfig
from placer.commands.options import context_option, kubeconfig_option, time_limit_option
from placer.inputs.files import read_policy
from placer.inputs.live import connect
from placer.metrics import Metrics, MetricsServer


@click.command("binder")
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
@click.option("--metrics-port", type=int, default=9090, show_default=True)
@click.option("--leader-elect/--no-leader-elect", default=True, show_default=True)
@click.option(
    "--lease-namespace", envvar="POD_NAMESPACE", default="redis-placer", show_default=True
)
@click.option("--lease-name", default="redis-placer-binder", show_default=True)
@click.option("--namespace", default=None, help="Watch one namespace (default: all).")
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
    "--manage-pdbs/--no-manage-pdbs",
    default=False,
    show_default=True,
    help="Create a PodDisruptionBudget (maxUnavailable: 1) for each shard placed and delete it "
    "with the shard; needs the RBAC of deploy/components/manage-pdbs.",
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
    manage_pdbs: bool,
) -> None:
    """Hold pending Redis pods until their shard is whole, solve the batch, and place it."""
    from placer.kube.adapter import default_instance
    from placer.kube.leader import run_with_leader_election

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    policy = read_policy(policy_path)
    adapter = connect(kubeconfig, context)
    client = adapter.api_client
    metrics = Metrics()
    config = BinderConfig(
        enforce=enforce,  # type: ignore[arg-type]
        namespace=namespace,
        solver=solver,  # type: ignore[arg-type]
        time_limit=time_limit,
        manage_pdbs=manage_pdbs,
    )
    binder = Binder(adapter, policy, config, metrics)
    stop = threading.Event()

    def on_signal(*_: Any) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    leading = threading.Event()

    def started_leading() -> None:
        leading.set()
        metrics.leader.set(1)

    def stopped_leading() -> None:
        leading.clear()
        metrics.leader.set(0)

    if leader_elect:
        threading.Thread(
            target=run_with_leader_election,
            args=(
                client,
                lease_namespace,
                lease_name,
                default_instance(),
                started_leading,
                stopped_leading,
                stop,
            ),
            name="leader-election",
            daemon=True,
        ).start()
    else:
        started_leading()
    with MetricsServer(metrics, port=metrics_port) as server:
        server.set_ready(True)
        binder.run(stop, leading=leading.is_set)
