"""``redis-placer rebalance``: audit, re-solve with moves and failovers allowed, and (with
``--apply``) fix the placement: failovers first (no data moves), evictions second.
"""

from __future__ import annotations

import json
import time
from typing import TYPE_CHECKING, Any

import click

from models.identity.read import formation_replicas
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
    load_live_inputs,
    namespace_option,
    output_option,
    overrun,
    time_limit_option,
    with_source,
)
from placer.inputs.content import require_running
from placer.output import render
from placer.rebalance.apply import apply_changes, label_values
from placer.rebalance.events import (
    record_actions,
    record_run,
    record_unanswered,
    run_failed,
    run_summary,
)
from placer.rebalance.report import print_table, push_gauges, with_reasons
from placer.redis.reading import access_warnings, reading_warnings, roles_document
from solver.changes import after_changes, change_list, limit_changes
from solver.check import audit as audit_violations
from solver.check import keep_plan, master_quorum_warnings
from solver.collector import collector_paused
from solver.survival import survival_verdicts

if TYPE_CHECKING:  # Redis is imported only when a run talks to it
    from placer.redis.access import Dialer
    from placer.redis.roles import RoleReading


def make_adapter(kubeconfig: str | None, context: str | None) -> Any:
    """The Kubernetes adapter for a live run (tests substitute an in-memory one here)."""
    from placer.inputs.live import connect

    return connect(
        kubeconfig, context, instead="pass -f FILE to plan from a dump (--apply needs the cluster)"
    )


@click.command(
    "rebalance",
    short_help="Fix the running placement: failovers, then evictions.",
    epilog=DUMP_EPILOG,
)
@with_source
@namespace_option
@click.option(
    "--apply", "apply_", is_flag=True, help="Perform the changes (default: print them only)."
)
@click.option(
    "--dry-run",
    is_flag=True,
    help="Print the changes and perform none: the default, said explicitly.",
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
@click.option(
    "--failover-timeout",
    type=Seconds(min=0.1),
    default=30.0,
    show_default=True,
    help="With --apply: seconds each CLUSTER FAILOVER may take to settle (the old master a "
    "replica of the new one); past it the step fails and its shard's other changes wait for "
    "the next run.",
)
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
@collector_paused()  # one run, then exit: no cycles worth a walk of every pod
def command(
    file: str | None,
    policy_path: str | None,
    context: str | None,
    kubeconfig: str | None,
    allow_empty: bool,
    namespace: str | None,
    apply_: bool,
    dry_run: bool,
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
    if apply_ and dry_run:
        fail("--dry-run and --apply contradict each other: give one (without either, a dry run)")
    if apply_ and file is not None:
        fail("--apply acts on a live cluster; drop -f (a dump can only be planned)")
    with StderrProgress(started) as progress:  # a line on stderr at most 2 s apart
        progress("reading", None, None)
        adapter: Any = None
        if file is not None:
            policy, snapshot = load_inputs(
                file, policy_path, context, kubeconfig, allow_empty, namespace=namespace
            )
        else:
            policy, snapshot, adapter = load_live_inputs(
                policy_path, context, kubeconfig, allow_empty, make_adapter, namespace=namespace
            )
        read = time.monotonic()
        if not allow_empty:
            require_running(snapshot, file or "cluster")
        port = redis_port or policy.redis.port
        from_redis = roles_from == "redis" or (roles_from == "auto" and file is None)
        dial: Dialer | None = None
        roles_note = ""
        if apply_ or from_redis:
            from placer.redis.reading import redis_dialer

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
            from placer.redis.reading import redis_roles, unreachable_note

            progress("reading roles from Redis", None, None)
            snapshot, reading, views = redis_roles(
                snapshot,
                dial,
                required=roles_from == "redis",
                replicas_per_shard=formation_replicas(policy),
            )
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
        end = deadline_of(started, time_limit, policy, snapshot)
        deadline = end - reserve
        solve_began = time.monotonic()
        plan = solve(
            snapshot,
            policy,
            "rebalance",
            SolveOptions(deadline=deadline, progress=progress, caps=Caps(max_moves, max_failovers)),
        )
        progress("auditing the changes", None, None)
        solve_took = time.monotonic() - solve_began
        planned = change_list(plan, snapshot)
        changes = limit_changes(planned, max_failovers, max_moves)
        after = after_changes(snapshot, policy, plan, changes)
        left_out = [c for c in planned if c not in changes]
        whole = after_changes(snapshot, policy, plan, planned) if left_out else after
        after_rows = with_reasons(snapshot, plan, after, whole, (max_moves, max_failovers))
    skipped = input_issues(snapshot)
    warnings = master_quorum_warnings(snapshot, policy)
    broken = _survival_left(snapshot, policy, changes, (max_moves, max_failovers), end, solve_took)
    late = overrun(started, read, time_limit, policy)  # the plan's time; applying it is not in it
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
        "survivalBroken": broken,
    }
    remaining_hard = [v for v in after if v.severity == "hard"]
    label_fixes = list(reading.mismatches) if reading and relabel else []
    if apply_ and has_errors(skipped):
        result["notApplied"] = "the input has errors (on stderr): nothing is changed"
    elif apply_ and (changes or label_fixes):
        from placer.inputs.live import read_cluster

        assert dial is not None  # --apply always resolves the credentials
        result["actions"] = apply_changes(
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
        current = read_cluster(adapter, policy, allow_empty=True, namespace=namespace)
        if reading is not None:
            from placer.redis.reading import redis_roles

            current, _, _ = redis_roles(
                current, dial, required=False, replicas_per_shard=formation_replicas(policy)
            )
        audited = audit_violations(current, policy)
        result["auditAfter"] = [v.model_dump(by_alias=True) for v in audited]
        remaining_hard = [v for v in audited if v.severity == "hard"]
        if report_configmap:
            ns, _, name = report_configmap.partition("/")
            adapter.write_configmap(ns, name, {"report.json": json.dumps(result, indent=2)})
    if apply_ and adapter is not None and reading is not None:
        record_unanswered(adapter, snapshot, reading)
    if apply_ and adapter is not None:
        record_run(adapter, run_summary(result, remaining_hard), run_failed(result))
    if pushgateway:
        push_gauges(pushgateway, before, remaining_hard, broken)
    # With no violation, whether each level could be judged at all (nodes without its label).
    verdicts = [] if before else survival_verdicts(snapshot, policy, keep_plan(snapshot), True)
    if output == "table":
        print_table(
            result,
            reading,
            before,
            changes,
            remaining_hard,
            skipped,
            (max_moves, max_failovers),
            verdicts,
        )
    elif output in ("html", "map"):
        from placer.output.pictures import rebalance_picture
        from solver.check import worst_domain_loss

        running = keep_plan(snapshot)
        losses = worst_domain_loss(snapshot, policy, running)
        picture = rebalance_picture(
            running, before, losses, plan, snapshot, changes, output, skipped, verdicts
        )
        click.echo(picture)
    else:
        click.echo(render.document(result, output))
    if broken and adapter is not None and apply_:
        from placer.rebalance.events import record_survival

        record_survival(adapter, broken)
    code = exit_code(skipped=skipped, unplaced=False, hard=bool(remaining_hard))
    notes = [*warnings, *late, *([roles_note] if roles_note else [])]
    finish([*skipped, *access_warnings(dial), *reading_warnings(reading)], notes, code)


LEVEL_ORDER = ("zone", "rack", "host")
MEND_LOOK_SECONDS = 0.5
"""The least time left in which the mend of a broken level is worked out (a small cluster's
solve takes less than this)."""
OUT_OF_TIME_MEND = (
    "not worked out: the time limit ran out first (give --time-limit more seconds to count the "
    "moves that would mend it)"
)


def _survival_left(
    snapshot: Snapshot,
    policy: Any,
    changes: list[Any],
    caps: tuple[int, int | None],
    end: float,
    solve_took: float,
) -> list[dict[str, Any]]:
    """With no change planned: each level whose one-domain loss would still take a shard or a
    master majority, and what would mend it (the moves a plan with moves allowed makes, and the
    flag that allows them). Empty when the placement survives, or changes are planned.

    Working out the mend is a solve of its own, of the same cluster: it is tried only while
    what is left before ``end`` (the command's limit) is at least what the run's own solve
    took (``solve_took``); otherwise the row says the time ran out, not that nothing mends it."""
    max_moves, max_failovers = caps
    if changes:
        return []
    from solver.changes import change_list
    from solver.check import keep_plan
    from solver.repair import Caps
    from solver.solve import SolveOptions, solve
    from solver.survival import survival_verdicts

    verdicts = survival_verdicts(snapshot, policy, keep_plan(snapshot))
    broken = [v for v in verdicts if v.judged and not v.survived]
    if not broken:
        return []
    mends: dict[str, str] = {}
    if max_moves == 0:
        # What moves would mend each level, were its survival a hard rule: the solver then
        # counts the fewest moves that keep every shard and majority through that loss.
        for v in sorted(broken, key=lambda v: LEVEL_ORDER.index(v.level)):
            if v.cannot_survive:
                continue
            left = end - time.monotonic()
            if left < max(solve_took, MEND_LOOK_SECONDS):
                mends[v.level] = OUT_OF_TIME_MEND
                continue
            rules = policy.rules.model_copy(update={"survive": v.level})
            strict = policy.model_copy(update={"rules": rules})
            plan = solve(
                snapshot,
                strict,
                "rebalance",
                SolveOptions(time_limit=left, caps=Caps(None, max_failovers), explain=False),
            )
            moves = [c for c in change_list(plan, snapshot) if c["kind"] == "move"]
            survived = {x.level for x in survival_verdicts(snapshot, strict, plan) if x.survived}
            if moves and v.level in survived:
                hard = "" if policy.rules.survive == v.level else f" and rules.survive: {v.level}"
                mends[v.level] = (
                    f"{len(moves)} move(s) would mend it; moves are off (--max-moves 0): allow "
                    f"them with --max-moves {len(moves)}{hard}"
                )
    rows = []
    for v in broken:
        takes = [
            f"losing {v.level} {t.domain} takes "
            + (
                f"{t.cluster}'s master majority"
                if t.majority_lost
                else f"{t.cluster} shard(s) " + ", ".join(t.shards_lost)
            )
            for t in v.takes
        ] or list(v.lost_already)
        rows.append(
            {
                "level": v.level,
                "severity": v.severity,
                "takes": takes,
                "cannotSurvive": v.cannot_survive,
                "mend": mends.get(v.level)
                or (
                    "; ".join(v.cannot_survive)
                    if v.cannot_survive
                    else "no change within the rules mends it in this run"
                ),
            }
        )
    return rows


def _report_reserve(snapshot: Snapshot) -> float:
    """Seconds kept back after the solve for auditing what the changes leave (twice when the
    caps cut the plan) and the quorum warnings: about 35 microseconds a member, pod and node."""
    items = len(snapshot.members) + len(snapshot.other_pods) + len(snapshot.nodes)
    return 0.05 + 3 * 35e-6 * items


__all__ = ["command"]
