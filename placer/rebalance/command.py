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
from placer.rebalance.events import record_actions, record_run
from placer.rebalance.redis_reading import reading_warnings, roles_document
from solver.changes import Change, after_changes, change_list, limit_changes
from solver.check import audit as audit_violations
from solver.check import master_quorum_warnings

if TYPE_CHECKING:  # Redis is imported only when a run talks to it
    from placer.rebalance.redis_access import Dialer
    from placer.rebalance.redis_roles import RoleMismatch, RoleReading


def _apply(
    snapshot: Snapshot,
    policy: Policy,
    changes: list[dict[str, str]],
    *,
    adapter: Any,
    dial: Dialer,
    relabel: bool,
    role_values: Mapping[str, str],
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
        found = dial(pods[pod_key])
        if found is None:
            raise click.ClickException(f"pod {pod_key} has no pod IP: cannot reach its Redis")
        return found

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
            value = role_values.get(role, role)
            result = adapter.patch_pod_labels(ns, name, {policy.labels.role: value})
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
        if relabel_fn is None or fix.pod in in_failover:
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
    type=click.Choice(["auto", "labels", "redis"]),
    default="auto",
    show_default=True,
    help="Where each pod's master/replica role comes from: CLUSTER NODES of the pods "
    "themselves (redis; sees the failovers labels miss), the role labels (labels), or auto: "
    "Redis on a live cluster when its pods answer, the labels for a dump (-f).",
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
    default=None,
    help="Make role labels follow Redis, where the binder reads them: swap them after a "
    "failover and fix every label Redis contradicts. Default: on with --apply when the roles "
    "were read from Redis.",
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
    relabel: bool | None,
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
        from_redis = roles_from == "redis" or (roles_from == "auto" and file is None)
        dial: Dialer | None = None
        roles_note = ""
        if apply_ or from_redis:
            from placer.rebalance.redis_reading import redis_dialer

            progress("reading credentials", None, None)
            found = redis_dialer(
                snapshot,
                policy,
                adapter,
                port,
                password_env,
                password_file,
                soft=not apply_ and roles_from == "auto",
            )
            if isinstance(found, str):
                roles_note = found
            else:
                dial = found
        reading: RoleReading | None = None
        if from_redis and dial is not None:
            from placer.rebalance.redis_reading import redis_roles, unreachable_note

            progress("reading roles from Redis", None, None)
            snapshot, reading, views = redis_roles(snapshot, dial, required=roles_from == "redis")
            if reading is None:
                roles_note = unreachable_note(views)
        relabel = bool(apply_ and reading is not None) if relabel is None else relabel
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
        "roles": roles_document("redis" if reading else "labels", reading, roles_note),
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
    label_fixes = list(reading.mismatches) if reading and relabel else []
    if apply_ and has_errors(skipped):
        result["notApplied"] = "the input has errors (on stderr): nothing is changed"
    elif apply_ and (changes or label_fixes):
        from placer.inputs.live import read_cluster

        assert dial is not None  # --apply always resolves the credentials
        result["actions"] = _apply(
            snapshot,
            policy,
            changes,
            adapter=adapter,
            dial=dial,
            relabel=relabel,
            role_values=label_values(snapshot, policy),
            max_failovers=max_failovers,
            max_moves=max_moves,
            failover_timeout=failover_timeout,
            label_fixes=label_fixes,
        )["actions"]
        record_actions(adapter, snapshot, result["actions"])
        current = read_cluster(adapter, policy, allow_empty=True)
        if reading is not None:
            from placer.rebalance.redis_reading import redis_roles

            current, _, _ = redis_roles(current, dial, required=False)
        audited = audit_violations(current, policy)
        result["auditAfter"] = [v.model_dump(by_alias=True) for v in audited]
        remaining_hard = [v for v in audited if v.severity == "hard"]
        if report_configmap:
            ns, _, name = report_configmap.partition("/")
            adapter.write_configmap(ns, name, {"report.json": json.dumps(result, indent=2)})
    if apply_ and adapter is not None:
        record_run(adapter, _summary(result, remaining_hard), _failed(result))
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
    notes = [*warnings, roles_note] if roles_note else warnings
    finish([*skipped, *reading_warnings(reading)], notes, code)


def label_values(snapshot: Snapshot, policy: Policy) -> dict[str, str]:
    """The value the role label takes for each role, as the deployment writes it (the OT
    operator's ``slave``), so a relabelled pod reads like its siblings."""
    from models.identity.facts import role_of

    key = policy.labels.role
    seen: dict[str, Counter[str]] = {}
    for member in snapshot.members:
        value = member.pod.labels.get(key)
        role = role_of(value, policy.identity.role_values)
        if value is not None and role is not None:
            seen.setdefault(role.value, Counter())[value] += 1
    return {role: values.most_common(1)[0][0] for role, values in seen.items()}


def _summary(result: dict[str, Any], remaining_hard: list[Violation]) -> str:
    """One line for the run's Event: what it did and what it leaves."""
    done = Counter((a["kind"], a["outcome"]) for a in result.get("actions", []))
    parts = [
        f"{done[(kind, 'ok')]} {word}"
        for kind, word in (
            ("failover", "failovers"),
            ("evict", "evictions"),
            ("relabel", "role labels fixed"),
        )
    ]
    bad = sum(n for (_, outcome), n in done.items() if outcome != "ok")
    text = "rebalance: " + ", ".join(parts)
    if bad:
        text += f", {bad} skipped or failed"
    if "notApplied" in result:
        text = f"rebalance: nothing applied: {result['notApplied']}"
    return text + f"; {len(remaining_hard)} hard violations left"


def _failed(result: dict[str, Any]) -> bool:
    return "notApplied" in result or any(
        a["outcome"] == "failed" for a in result.get("actions", [])
    )


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
