"""``redis-placer rebalance``: audit, re-solve with moves and failovers allowed, and (with
``--apply``) fix the placement: failovers first (no data moves), evictions second.
"""

import json
import sys
from collections.abc import Callable
from typing import Any

import click

from models.plan import Plan
from models.policy import Policy
from models.snapshot import Snapshot
from placer import render
from placer.cli import (
    EXIT_BAD_INPUT,
    EXIT_OK,
    EXIT_VIOLATIONS,
    fail,
    load_inputs,
    output_option,
    time_limit_option,
    with_source,
)
from solver.check import audit as audit_violations
from solver.solve import SolveOptions, solve


def change_list(plan: Plan) -> list[dict[str, str]]:
    """The changes, cheapest first: failovers (no data moves), then pod moves."""
    changes = [
        {"kind": "failover", "shard": f"{f.cluster}/{f.shard}", "from": f.from_, "to": f.to}
        for f in plan.failovers
    ]
    changes += [
        {
            "kind": "move",
            "shard": f"{a.cluster}/{a.shard}",
            "pod": a.pod,
            "from": a.from_node or "",
            "to": a.node or "",
        }
        for a in plan.assignments
        if a.action == "move"
    ]
    return changes


def _limit(
    changes: list[dict[str, str]], max_failovers: int | None, max_moves: int
) -> list[dict[str, str]]:
    failovers = [c for c in changes if c["kind"] == "failover"][
        : max_failovers if max_failovers is not None else None
    ]
    moves = [c for c in changes if c["kind"] == "move"][:max_moves]
    return failovers + moves


def _apply(
    snapshot: Snapshot,
    policy: Policy,
    changes: list[dict[str, str]],
    *,
    adapter: Any,
    password: str | None,
    relabel: bool,
    max_failovers: int | None,
    max_moves: int,
    failover_timeout: float,
) -> dict[str, Any]:
    from placer.failover import EvictOutcome, FailoverStep, MoveStep, RebalanceExecutor
    from placer.kube.adapter import EvictOutcome as KubeEvict
    from placer.redis_ops import RedisEndpoint

    pods = {m.key: m for m in snapshot.members}

    def endpoint(pod_key: str) -> RedisEndpoint:
        ip = pods[pod_key].pod.pod_ip
        if not ip:
            raise click.ClickException(f"pod {pod_key} has no pod IP: cannot reach its Redis")
        return RedisEndpoint(host=ip, port=policy.redis.port, password=password)

    failovers = [
        FailoverStep(
            cluster=pods[c["from"]].cluster,
            shard=pods[c["from"]].shard,
            from_pod=c["from"],
            to_pod=c["to"],
            to_endpoint=endpoint(c["to"]),
            from_endpoint=endpoint(c["from"]),
        )
        for c in changes
        if c["kind"] == "failover"
    ]
    moves = [
        MoveStep(pod=c["pod"], shard_key=c["shard"], node_from=c["from"], node_to=c["to"])
        for c in changes
        if c["kind"] == "move"
    ]

    def evict(pod_key: str) -> EvictOutcome:
        ns, name = pod_key.split("/", 1)
        result = adapter.evict_pod(ns, name, pods[pod_key].pod.uid or None)
        status = {
            KubeEvict.EVICTED: "evicted",
            KubeEvict.BLOCKED: "blocked",
            KubeEvict.GONE: "gone",
        }.get(result.outcome, "error")
        return EvictOutcome(status=status, reason=result.message)

    def healthy(shard_key: str) -> int:
        """Ready, not terminating members of one shard, read from the API for that shard only."""
        namespace, cluster, shard = shard_key.split("/", 2)
        selector = f"{policy.labels.cluster}={cluster},{policy.labels.shard}={shard}"
        count = 0
        for obj in adapter.list_pods(namespace=namespace, label_selector=selector):
            ready = any(
                c.get("type") == "Ready" and c.get("status") == "True"
                for c in (obj.get("status") or {}).get("conditions") or []
            )
            if ready and not (obj.get("metadata") or {}).get("deletionTimestamp"):
                count += 1
        return count

    relabel_fn: Callable[[str, str], None] | None = None
    if relabel:

        def relabel_fn(pod_key: str, role: str) -> None:
            ns, name = pod_key.split("/", 1)
            adapter.patch_pod_labels(ns, name, {policy.labels.role: role})

    executor = RebalanceExecutor(
        evict=evict,
        shard_healthy_members=healthy,
        relabel=relabel_fn,
        max_failovers=max_failovers,
        max_moves=max_moves,
        failover_timeout_s=failover_timeout,
    )
    report = executor.run(failovers, moves)
    return json.loads(report.to_json())


@click.command("rebalance")
@with_source
@click.option(
    "--apply", "apply_", is_flag=True, help="Perform the changes (default: print them only)."
)
@click.option(
    "--max-moves",
    type=click.IntRange(min=0),
    default=1,
    show_default=True,
    help="Evictions per run.",
)
@click.option(
    "--max-failovers",
    type=click.IntRange(min=0),
    default=None,
    help="Failovers per run (default: all).",
)
@click.option(
    "--relabel/--no-relabel",
    default=False,
    help="After a failover, swap the role labels of the two pods.",
)
@click.option(
    "--password-env", default=None, help="Env var holding the Redis password (never logged)."
)
@click.option(
    "--password-file",
    default=None,
    type=click.Path(dir_okay=False),
    help="File holding the Redis password.",
)
@click.option("--failover-timeout", type=click.FloatRange(min=0.1), default=30.0, show_default=True)
@click.option(
    "--report-configmap",
    default=None,
    metavar="NS/NAME",
    help="Also write the report to this ConfigMap.",
)
@click.option(
    "--pushgateway",
    default=None,
    metavar="URL",
    help="Push the run's metrics to a Prometheus Pushgateway.",
)
@output_option
@time_limit_option
def command(
    file: str | None,
    policy_path: str | None,
    context: str | None,
    kubeconfig: str | None,
    apply_: bool,
    max_moves: int,
    max_failovers: int | None,
    relabel: bool,
    password_env: str | None,
    password_file: str | None,
    failover_timeout: float,
    report_configmap: str | None,
    pushgateway: str | None,
    output: str,
    time_limit: float | None,
) -> None:
    """Audit and fix placement: failovers first, evictions second. Dry-run unless --apply."""
    if apply_ and file is not None:
        fail("--apply acts on a live cluster; drop -f (a dump can only be planned)")
    policy, snapshot = load_inputs(file, policy_path, context, kubeconfig)
    before = audit_violations(snapshot, policy)
    plan = solve(snapshot, policy, "rebalance", SolveOptions(time_limit=time_limit))
    changes = _limit(change_list(plan), max_failovers, max_moves)
    result: dict[str, Any] = {
        "apply": apply_,
        "auditBefore": [v.model_dump(by_alias=True) for v in before],
        "plan": {"status": plan.status, "objective": plan.objective, "bound": plan.bound},
        "changes": changes,
        "violationsAfterPlan": [v.model_dump(by_alias=True) for v in plan.violations],
    }
    remaining_hard = [v for v in plan.violations if v.severity == "hard"]
    if apply_ and changes:
        from placer.kube.adapter import KubernetesAdapter
        from placer.kube.config import load_api_client
        from placer.live import snapshot_from_adapter
        from placer.redis_ops import password_from_env_or_file

        adapter = KubernetesAdapter(load_api_client(kubeconfig, context))
        password = password_from_env_or_file(
            password_env or policy.redis.password_env, password_file or policy.redis.password_file
        )
        result["actions"] = _apply(
            snapshot,
            policy,
            changes,
            adapter=adapter,
            password=password,
            relabel=relabel,
            max_failovers=max_failovers,
            max_moves=max_moves,
            failover_timeout=failover_timeout,
        )["actions"]
        after = audit_violations(snapshot_from_adapter(adapter, policy), policy)
        result["auditAfter"] = [v.model_dump(by_alias=True) for v in after]
        remaining_hard = [v for v in after if v.severity == "hard"]
        if report_configmap:
            ns, _, name = report_configmap.partition("/")
            adapter.write_configmap(ns, name, {"report.json": json.dumps(result, indent=2)})
    if pushgateway:
        _push(pushgateway, before, remaining_hard)
    if output == "table":
        click.echo(render.violations_table(before) if before else "audit: no violations")
        click.echo()
        if not changes:
            click.echo("no changes needed")
        for i, c in enumerate(changes, 1):
            if c["kind"] == "failover":
                click.echo(f"{i}. failover  shard {c['shard']}: promote {c['to']} over {c['from']}")
            else:
                click.echo(f"{i}. move      {c['pod']}: evict from {c['from']} (target {c['to']})")
        click.echo(f"\n{'applied' if apply_ else 'dry run: pass --apply to perform these changes'}")
        for action in result.get("actions", []):
            click.echo(
                f"  {action['kind']} {action['target']}: {action['outcome']} {action.get('reason', '')}"
            )
    else:
        click.echo(
            json.dumps(result, indent=2)
            if output == "json"
            else render.yaml.safe_dump(result, sort_keys=False)
        )
    if any(s.severity == "error" for s in plan.skipped):
        sys.exit(EXIT_BAD_INPUT)
    sys.exit(EXIT_VIOLATIONS if remaining_hard else EXIT_OK)


def _push(url: str, before: list[Any], remaining: list[Any]) -> None:
    from prometheus_client import CollectorRegistry, Gauge, push_to_gateway

    registry = CollectorRegistry()
    gauge = Gauge(
        "redis_placer_violations",
        "Violations of the placement",
        ["rule", "severity"],
        registry=registry,
    )
    for v in before:
        gauge.labels(v.rule, v.severity).inc()
    Gauge(
        "redis_placer_rebalance_remaining_hard_violations",
        "Hard violations left",
        registry=registry,
    ).set(len(remaining))
    push_to_gateway(url, job="redis-placer-rebalance", registry=registry)


__all__ = ["command"]
