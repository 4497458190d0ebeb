"""``redis-placer rebalance``: audit, re-solve with moves and failovers allowed, and (with
``--apply``) fix the placement: failovers first (no data moves), evictions second.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import click

from models.plan import SkippedInput, Violation
from models.policy import Policy
from models.snapshot import Snapshot
from placer import command_started
from placer.commands.options import (
    DUMP_EPILOG,
    Seconds,
    StderrProgress,
    deadline_of,
    exit_code,
    fail,
    finish,
    has_errors,
    input_issues,
    load_inputs,
    output_option,
    time_limit_option,
    with_source,
)
from placer.output import render
from solver.changes import Change, after_changes, change_list, limit_changes
from solver.check import audit as audit_violations
from solver.check import master_quorum_warnings

if TYPE_CHECKING:  # Redis is imported only when a run talks to it
    from placer.rebalance.redis_roles import RoleMismatch, RoleReading, View


def _apply(
    snapshot: Snapshot,
    policy: Policy,
    changes: list[dict[str, str]],
    *,
    adapter: Any,
    password: str | None,
    port: int,
    relabel: bool,
    max_failovers: int | None,
    max_moves: int,
    failover_timeout: float,
    label_fixes: Sequence[RoleMismatch] = (),
) -> dict[str, Any]:
    """Run the change list; with ``relabel``, first make ``label_fixes`` follow Redis."""
    from placer.kube.adapter import EvictOutcome as KubeEvict
    from placer.rebalance.failover import (
        Action,
        EvictOutcome,
        FailoverStep,
        MoveStep,
        RebalanceExecutor,
    )
    from placer.rebalance.redis_ops import RedisEndpoint

    pods = {m.key: m for m in snapshot.members}

    def endpoint(pod_key: str) -> RedisEndpoint:
        ip = pods[pod_key].pod.pod_ip
        if not ip:
            raise click.ClickException(f"pod {pod_key} has no pod IP: cannot reach its Redis")
        return RedisEndpoint(host=ip, port=port, password=password)

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
        namespace = shard_key.split("/", 1)[0]
        names = {m.pod.name for m in snapshot.shards.get(shard_key, ())}
        selector = ",".join(f"{k}={v}" for k, v in sorted(policy.selector.items()))
        count = 0
        for obj in adapter.list_pods(namespace=namespace, label_selector=selector):
            if (obj.get("metadata") or {}).get("name") not in names:
                continue  # the shard's members keep their StatefulSet names when recreated
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
            result = adapter.patch_pod_labels(ns, name, {policy.labels.role: role})
            if not result.ok:
                raise RuntimeError(f"{result.outcome.value} ({result.status}): {result.message}")

    executor = RebalanceExecutor(
        evict=evict,
        shard_healthy_members=healthy,
        relabel=relabel_fn,
        max_failovers=max_failovers,
        max_moves=max_moves,
        failover_timeout_s=failover_timeout,
    )
    # Labels Redis contradicts, outside any failover pair (those are relabelled after it).
    fixes: list[Action] = []
    in_failover = {f.to_pod for f in failovers} | {f.from_pod for f in failovers}
    for fix in label_fixes:
        if relabel_fn is None or not fix.confirmed or fix.pod in in_failover:
            continue
        try:
            relabel_fn(fix.pod, fix.redis)
        except Exception as exc:
            outcome, reason = "failed", f"{type(exc).__name__}: {exc}"
        else:
            outcome, reason = "ok", f"label was {fix.label or 'missing'}; Redis says {fix.redis}"
        fixes.append(
            Action(
                kind="relabel",
                shard=pods[fix.pod].shard_key,
                target=fix.pod,
                destination=fix.redis,
                outcome=outcome,
                reason=reason,
            )
        )
    report = executor.run(failovers, moves)
    report.actions[:0] = fixes
    return json.loads(report.to_json())


def make_adapter(kubeconfig: str | None, context: str | None) -> Any:
    """The Kubernetes adapter for a live run (tests substitute an in-memory one here)."""
    from placer.inputs.live import connect

    return connect(kubeconfig, context)


def _live_inputs(
    policy_path: str | None, context: str | None, kubeconfig: str | None, allow_empty: bool
) -> tuple[Policy, Snapshot, Any]:
    """Policy, snapshot and the adapter it was read through (the one ``--apply`` acts with)."""
    from placer.inputs.files import read_policy
    from placer.inputs.live import read_cluster

    policy = read_policy(policy_path)
    adapter = make_adapter(kubeconfig, context)
    return policy, read_cluster(adapter, policy, allow_empty=allow_empty), adapter


def redis_password(
    policy: Policy, password_env: str | None, password_file: str | None
) -> str | None:
    """The Redis password from the options, else the policy's ``redis`` source; exit 2 when
    the named source cannot be read."""
    from placer.rebalance.redis_ops import PasswordSourceError, password_from_env_or_file

    try:
        return password_from_env_or_file(
            password_env or policy.redis.password_env, password_file or policy.redis.password_file
        )
    except PasswordSourceError as exc:
        fail(str(exc))


def redis_roles(
    snapshot: Snapshot,
    port: int,
    password: str | None,
    *,
    required: bool,
    views: Mapping[str, View] | None = None,
) -> tuple[Snapshot, RoleReading]:
    """``snapshot`` with each member's role as Redis reports it (see placer.rebalance.redis_roles).

    ``required``: exit 2 when no pod answers (the run would otherwise act on labels
    it was asked not to trust); otherwise the labels stand. ``views``: the ``CLUSTER NODES``
    answers when the caller has read them already (they are read here otherwise).
    """
    from placer.rebalance.redis_roles import apply_roles, read_views, resolve_roles

    if views is None:
        views = read_views(snapshot.members, port, password)
    reading = resolve_roles(snapshot.members, views, port)
    if required and snapshot.running and not reading.read:
        if not reading.tried:
            fail(
                f"--roles redis: none of the {len(snapshot.running)} running Redis pods "
                "has a pod IP (status.podIP); cannot read roles from Redis"
            )
        ip = {m.key: m.pod.pod_ip for m in snapshot.members}
        tried = [f"{k} ({ip[k]}:{port})" for k in reading.tried]
        shown = ", ".join(tried[:8]) + (f" and {len(tried) - 8} more" if len(tried) > 8 else "")
        first = views[reading.tried[0]]
        fail(f"--roles redis: no Redis pod could be read; tried {shown}; first error: {first}")
    return apply_roles(snapshot, reading), reading


def reading_warnings(reading: RoleReading | None) -> list[SkippedInput]:
    """Roles Redis could not be trusted for, as input warnings (each label stands)."""
    issues = reading.issues if reading is not None else []
    return [SkippedInput(object=i.object, message=i.message, severity="warning") for i in issues]


def _roles_document(source: str, reading: RoleReading | None) -> dict[str, Any]:
    if reading is None:
        return {"source": source}
    return {
        "source": source,
        "read": list(reading.read),
        "unreachable": list(reading.unreachable),
        "mismatches": [m.model_dump() for m in reading.mismatches],
        "issues": [i.model_dump() for i in reading.issues],
    }


@click.command(
    "rebalance",
    short_help="Fix the running placement: failovers, then evictions.",
    epilog=DUMP_EPILOG,
)
@with_source
@click.option(
    "--apply", "apply_", is_flag=True, help="Perform the changes (default: print them only)."
)
@click.option(
    "--roles",
    "roles_from",
    type=click.Choice(["labels", "redis"]),
    default="labels",
    show_default=True,
    help="Where each pod's master/replica role comes from: its role label, or CLUSTER NODES "
    "of the pods themselves (sees failovers the labels missed).",
)
@click.option(
    "--redis-port",
    type=click.IntRange(1, 65535),
    default=None,
    help="Redis port of the pods (default: policy redis.port, 6379).",
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
    help="Make role labels follow Redis: swap them after a failover and, with --roles redis, "
    "fix every label Redis contradicts.",
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
@click.option("--failover-timeout", type=Seconds(min=0.1), default=30.0, show_default=True)
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
@time_limit_option()
def command(
    file: str | None,
    policy_path: str | None,
    context: str | None,
    kubeconfig: str | None,
    allow_empty: bool,
    apply_: bool,
    roles_from: str,
    redis_port: int | None,
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
    started = command_started()
    if apply_ and file is not None:
        fail("--apply acts on a live cluster; drop -f (a dump can only be planned)")
    with StderrProgress(started) as progress:  # a line on stderr at most 2 s apart
        progress("reading", None, None)
        adapter: Any = None
        if file is not None:
            policy, snapshot = load_inputs(file, policy_path, context, kubeconfig, allow_empty)
        else:
            policy, snapshot, adapter = _live_inputs(policy_path, context, kubeconfig, allow_empty)
        port = redis_port or policy.redis.port
        password = (
            redis_password(policy, password_env, password_file)
            if apply_ or roles_from == "redis"
            else None
        )
        reading: RoleReading | None = None
        if roles_from == "redis":
            snapshot, reading = redis_roles(snapshot, port, password, required=True)
        progress("auditing", None, None)
        from solver.repair import Caps  # the solver (OR-tools) loads once the lines run
        from solver.solve import SolveOptions, solve

        audit_began = time.monotonic()
        before = audit_violations(snapshot, policy)
        # After the solve: two audits of what the changes leave, the quorum warnings and the
        # report; timed by this audit on the machine as loaded as it is now.
        reserve = max(_report_reserve(snapshot), 3 * (time.monotonic() - audit_began))
        deadline = deadline_of(started, time_limit, policy, snapshot) - reserve
        plan = solve(
            snapshot,
            policy,
            "rebalance",
            SolveOptions(deadline=deadline, progress=progress, caps=Caps(max_moves, max_failovers)),
        )
        progress("auditing the changes", None, None)
        planned = change_list(plan, snapshot)
        changes = limit_changes(planned, max_failovers, max_moves)
        after = after_changes(snapshot, policy, plan, changes)
        left_out = [c for c in planned if c not in changes]
        whole = after_changes(snapshot, policy, plan, planned) if left_out else after
        after_rows = _with_reasons(snapshot, plan, after, whole, (max_moves, max_failovers))
    skipped = input_issues(snapshot)
    warnings = master_quorum_warnings(snapshot, policy)
    result: dict[str, Any] = {
        "apply": apply_,
        "roles": _roles_document(roles_from, reading),
        "auditBefore": [v.model_dump(by_alias=True) for v in before],
        "plan": {
            "status": plan.status,
            "engine": plan.engine,
            "objective": plan.objective,
            "bound": plan.bound,
            **({"boundNote": plan.bound_note} if plan.bound_note else {}),
        },
        "changes": changes,
        "changesLeftOut": left_out,
        "violationsAfterPlan": after_rows,
        "skipped": [s.model_dump(by_alias=True) for s in skipped],
        "warnings": warnings,
    }
    remaining_hard = [v for v in after if v.severity == "hard"]
    label_fixes = [m for m in reading.mismatches if m.confirmed] if reading and relabel else []
    if apply_ and has_errors(skipped):
        result["notApplied"] = "the input has errors (on stderr): nothing is changed"
    elif apply_ and (changes or label_fixes):
        from placer.inputs.live import read_cluster

        result["actions"] = _apply(
            snapshot,
            policy,
            changes,
            adapter=adapter,
            password=password,
            port=port,
            relabel=relabel,
            max_failovers=max_failovers,
            max_moves=max_moves,
            failover_timeout=failover_timeout,
            label_fixes=label_fixes,
        )["actions"]
        current = read_cluster(adapter, policy, allow_empty=True)
        if roles_from == "redis":
            current, _ = redis_roles(current, port, password, required=False)
        audited = audit_violations(current, policy)
        result["auditAfter"] = [v.model_dump(by_alias=True) for v in audited]
        remaining_hard = [v for v in audited if v.severity == "hard"]
        if report_configmap:
            ns, _, name = report_configmap.partition("/")
            adapter.write_configmap(ns, name, {"report.json": json.dumps(result, indent=2)})
    if pushgateway:
        _push(pushgateway, before, remaining_hard)
    if output == "table":
        _print_table(
            result, reading, before, changes, remaining_hard, skipped, (max_moves, max_failovers)
        )
    elif output in ("html", "map"):
        from placer.output.pictures import rebalance_picture
        from solver.check import keep_plan, worst_domain_loss

        running = keep_plan(snapshot)
        losses = worst_domain_loss(snapshot, policy, running)
        picture = rebalance_picture(
            running, before, losses, plan, snapshot, changes, output, skipped
        )
        click.echo(picture)
    else:
        click.echo(render.document(result, output))
    code = exit_code(skipped=skipped, unplaced=False, hard=bool(remaining_hard))
    finish([*skipped, *reading_warnings(reading)], warnings, code)


def _report_reserve(snapshot: Snapshot) -> float:
    """Seconds kept back after the solve for auditing what the changes leave (twice when the
    caps cut the plan) and the quorum warnings: about 35 microseconds a member, pod and node."""
    items = len(snapshot.members) + len(snapshot.other_pods) + len(snapshot.nodes)
    return 0.05 + 3 * 35e-6 * items


def _with_reasons(
    snapshot: Snapshot,
    plan: Any,
    after: list[Violation],
    whole: list[Violation],
    caps: tuple[int, int | None],
) -> list[dict[str, Any]]:
    """The violations the run's changes leave, each hard one with why it stays: the cap (the
    whole plan removes it), the repair's reason (no room, the rules), or the rules."""
    shard_of = {m.key: m.shard_key for m in snapshot.members}
    gone_in_whole = {(v.rule, tuple(v.pods)) for v in after} - {
        (v.rule, tuple(v.pods)) for v in whole
    }
    max_moves, max_failovers = caps
    limits = f"--max-moves {max_moves}" + (
        f", --max-failovers {max_failovers}" if max_failovers is not None else ""
    )
    rows = []
    for v in after:
        row = v.model_dump(by_alias=True)
        if v.severity == "hard":
            shards = [shard_of[p] for p in v.pods if p in shard_of]
            found = next((plan.stay_reasons[s] for s in shards if s in plan.stay_reasons), None)
            if (v.rule, tuple(v.pods)) in gone_in_whole:
                row["why"] = f"the cap: {limits}; the plan's changes left for later runs remove it"
            elif found is not None:
                row["why"] = found
            else:
                row["why"] = (
                    "the rules: no change found within the time limit removes it without "
                    "breaking another hard rule"
                )
        rows.append(row)
    return rows


def _print_table(
    result: dict[str, Any],
    reading: RoleReading | None,
    before: list[Violation],
    changes: list[Change],
    remaining_hard: list[Violation],
    skipped: list[SkippedInput],
    caps: tuple[int, int | None],
) -> None:
    """The report for a person: the audit, the changes of this run, and what they leave."""
    if reading is not None:
        click.echo(
            f"roles: from Redis ({len(reading.read)} of {len(reading.tried)} pods read"
            + (f", {len(reading.issues)} warnings on stderr" if reading.issues else "")
            + ")"
        )
        for mismatch in reading.mismatches:
            click.echo(f"  {mismatch.message}")
        if not reading.mismatches:
            click.echo("  every role label matches Redis")
        click.echo()
    click.echo(render.violations_table(before) if before else "audit: no violations")
    click.echo()
    for i, c in enumerate(changes, 1):
        if c["kind"] == "failover":
            click.echo(f"{i}. failover  shard {c['shard']}: promote {c['to']} over {c['from']}")
        else:
            click.echo(f"{i}. move      {c['pod']}: evict from {c['from']} (target {c['to']})")
    left_out = result["changesLeftOut"]
    if left_out:
        max_moves, max_failovers = caps
        limits = f"--max-moves {max_moves}" + (
            f", --max-failovers {max_failovers}" if max_failovers is not None else ""
        )
        click.echo(f"{_count(len(left_out), 'planned change')} left for later runs ({limits})")
    if not changes and not remaining_hard:
        click.echo("no changes needed")
    elif remaining_hard:
        where = " in the cluster" if "actions" in result else ""
        when = "after these changes" if changes else "no change planned"
        remain = "remains" if len(remaining_hard) == 1 else "remain"
        click.echo(f"{when}: {_count(len(remaining_hard), 'hard violation')} {remain}{where}")
        click.echo(render.violations_table(remaining_hard))
        if "actions" not in result:
            whys = Counter(row["why"] for row in result["violationsAfterPlan"] if row.get("why"))
            for why, count in whys.most_common(8):
                click.echo(f"  why ({count}): {why}")
            if len(whys) > 8:
                click.echo(f"  ({len(whys) - 8} more reasons: -o json lists each)")
    note = render.input_note(skipped)
    if note:
        click.echo(note)
    if "notApplied" in result:
        click.echo(f"\nnot applied: {result['notApplied']}")
    else:
        click.echo(
            f"\n{'applied' if result['apply'] else 'dry run: pass --apply to perform these changes'}"
        )
    for action in result.get("actions", []):
        click.echo(
            f"  {action['kind']} {action['target']}: {action['outcome']} {action.get('reason', '')}"
        )


def _count(n: int, thing: str) -> str:
    return f"{n} {thing}{'' if n == 1 else 's'}"


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
