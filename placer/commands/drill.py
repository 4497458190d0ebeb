"""``redis-placer drill``: what losing a zone, rack or host does to each Redis cluster."""

from typing import Any, cast

import click
import yaml

from models.drill import DrillReport
from models.errors import InputError
from models.identity.read import formation_replicas
from models.plan import Plan, SkippedInput
from models.policy import LEVELS, Level, Policy
from models.snapshot import Snapshot
from placer.commands.options import (
    DUMP_EPILOG,
    exit_code,
    fail,
    finish,
    has_errors,
    load_inputs,
    load_live_inputs,
    namespace_option,
    output_option,
    with_source,
)
from placer.inputs.content import ALLOW
from placer.output import render
from solver.check import final_placement, keep_plan, master_quorum_warnings
from solver.collector import collector_paused
from solver.drill import (
    Outage,
    absent_nodes,
    absent_pods,
    drill,
    every_domain,
    resolve_outage,
)


def read_plan(
    path: str, snapshot: Snapshot, namespace: str | None = None
) -> tuple[Plan, list[str]]:
    """A plan as ``redis-placer plan -o json`` (or yaml) wrote it, for this snapshot, and the
    warnings it gives (see ``plan_fit``); with ``namespace``, its pods of that namespace only."""
    from pydantic import ValidationError

    from placer.inputs.files import read_text

    source = "stdin" if path == "-" else path
    try:
        data = yaml.safe_load(read_text(path))
    except yaml.YAMLError as exc:
        raise InputError(
            f"not JSON or YAML: {str(exc).splitlines()[0]}", obj=f"plan {source}"
        ) from None
    if not isinstance(data, dict):
        raise InputError(
            "must be a plan document (redis-placer plan -o json)", obj=f"plan {source}"
        )
    try:
        plan = Plan.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "plan"
        raise InputError(first["msg"], obj=f"plan {source}", field=where) from None
    if namespace is not None:
        plan = in_namespace(plan, namespace)
    return plan, plan_fit(plan, snapshot, f"plan {source}")


def in_namespace(plan: Plan, namespace: str) -> Plan:
    """The part of a plan that concerns the Redis pods of one namespace (``-n``)."""
    prefix = f"{namespace}/"
    return plan.model_copy(
        update={
            "assignments": [a for a in plan.assignments if a.pod.startswith(prefix)],
            "failovers": [f for f in plan.failovers if f.cluster.startswith(prefix)],
            "unplaced": [u for u in plan.unplaced if u.pod.startswith(prefix)],
        }
    )


def _more(count: int) -> str:
    return f" (and {count} more)" if count else ""


def plan_fit(plan: Plan, snapshot: Snapshot, obj: str) -> list[str]:
    """Refuse a plan that is not this snapshot's; warn of its pods the snapshot no longer holds.

    A node the snapshot lacks is an error: the plan was made for another cluster (or before the
    node went), and a pod sent there would be drilled as down already, a verdict on a placement
    that cannot happen. So is a plan none of whose pods is here. A few pods missing, the others
    here, is a warning: pods deleted since the plan was made (a scale-down) are gone whatever
    the plan says, and the rest of the plan still places the pods that remain, which is what the
    drill judges; the warning says which pods it leaves out.
    """
    missing = absent_pods(snapshot, plan)
    if plan.assignments and len(missing) == len({a.pod for a in plan.assignments}):
        raise InputError(
            "none of its pods is in the snapshot: plan and snapshot do not belong together",
            obj=obj,
        )
    strays = absent_nodes(snapshot, plan)
    if strays:
        first = strays[0]
        raise InputError(
            f"assigns {first.pod} to node {first.node}, which is not in the snapshot"
            + _more(len(strays) - 1),
            obj=obj,
        )
    if not missing:
        return []
    return [
        f"{obj}: assigns {missing[0]}, which is not in the snapshot{_more(len(missing) - 1)}: "
        "not drilled (deleted since the plan was made?)"
    ]


def parse_failures(values: tuple[str, ...], snapshot: Snapshot) -> list[Outage]:
    """Each ``--fail`` is one failure; ``LEVEL=DOMAIN,LEVEL=DOMAIN`` fail together."""
    outages = []
    for value in values:
        pairs = []
        for part in value.split(","):
            level, sep, domain = part.strip().partition("=")
            if not sep or not level or not domain:
                raise InputError(
                    f"{part.strip()!r} is not LEVEL=DOMAIN (e.g. zone=zone-a)", obj="--fail"
                )
            pairs.append((level, domain))
        outages.append(resolve_outage(snapshot, pairs))
    return outages


def _redis_facts(
    snapshot: Snapshot,
    policy: Policy,
    adapter: Any,
    port: int | None,
    password_env: str | None,
    password_file: str | None,
) -> tuple[Snapshot, dict[str, int], dict[str, int], list[SkippedInput]]:
    """Roles, replication offsets and slots as the pods' Redis reports them, and what could not
    be read (input warnings: the label stands, the replica is ranked last)."""
    from placer.redis.offsets import replication_offsets, served_slots
    from placer.redis.reading import reading_warnings, redis_dialer, redis_roles
    from placer.redis.roles import read_views

    redis_port = port or policy.redis.port
    dial = redis_dialer(snapshot, policy, adapter, redis_port, password_env, password_file)
    assert not isinstance(dial, str)  # not soft: unreadable credentials exit
    views = read_views(snapshot.members, dial)
    snapshot, reading, _ = redis_roles(
        snapshot, dial, required=True, views=views, replicas_per_shard=formation_replicas(policy)
    )
    offsets, problems = replication_offsets(snapshot.members, dial)
    unread = [
        SkippedInput(
            object=f"pod {pod}",
            message=f"replication offset not read ({problem}); ranked last",
            severity="warning",
        )
        for pod, problem in sorted(problems.items())
    ]
    return snapshot, offsets, served_slots(views), [*reading_warnings(reading), *unread]


def unlabelled_nodes(snapshot: Snapshot, plan: Plan | None, level: Level) -> list[str]:
    """The nodes of the drilled placement holding Redis pods without the level's label."""
    placed = final_placement(snapshot, plan if plan is not None else keep_plan(snapshot))
    held = {name for name, _ in placed.values() if name is not None}
    nodes = snapshot.node_by_name
    return sorted(n for n in held if n in nodes and nodes[n].domain(level) is None)


def nothing_drilled(report: DrillReport, plan: Plan | None, level: Level | None) -> str:
    """Why the drill has nothing to judge, or "" when it has."""
    if report.members == 0:
        hint = "; pass --plan to drill a plan" if plan is None and report.left_out else ""
        hint += f"; {report.placement_note}" if report.placement_note else ""
        pending = f"{len(report.left_out)} pending or unplaced"
        return f"no Redis pod has a node ({pending}{hint})"
    if not report.failures:
        return f"no {level} holds a Redis pod (the nodes they run on have no {level} label)"
    return ""


def _emit(
    report: DrillReport,
    snapshot: Snapshot,
    plan: Plan | None,
    output: str,
    level_checked: str | None,
) -> None:
    if output in ("json", "yaml"):
        click.echo(render.document(report.to_json_dict(), output))
    elif output in ("html", "map"):
        from placer.output import pictures

        click.echo(pictures.drill_picture(report, snapshot, plan, output))
    else:
        from placer.output.drill import drill_text

        click.echo(drill_text(report, level_checked))


@click.command("drill", short_help="Simulate losing a zone, rack or host.", epilog=DUMP_EPILOG)
@with_source
@namespace_option
@click.option(
    "--plan",
    "plan_path",
    metavar="FILE",
    default=None,
    help="Drill this plan's placement (redis-placer plan -o json output, or - for stdin) "
    "instead of the running pods.",
)
@click.option(
    "--fail",
    "fail_specs",
    multiple=True,
    metavar="LEVEL=DOMAIN[,LEVEL=DOMAIN...]",
    help="A failure to simulate, e.g. zone=zone-a or host=node-7; domains joined by a comma "
    "fail together. Repeat for several failures. Default: every domain of --level in turn.",
)
@click.option(
    "--level",
    type=click.Choice(list(LEVELS)),
    default=None,
    help="The level drilled domain by domain without --fail (default: the policy's "
    "rules.survive, else zone).",
)
@click.option(
    "--roles",
    "roles_from",
    type=click.Choice(["labels", "redis"]),
    default="labels",
    show_default=True,
    help="labels: roles from the role label, promotion of the first reachable replica by pod "
    "name. redis: roles, replication offsets and slots read from the pods' Redis.",
)
@click.option(
    "--redis-port",
    type=click.IntRange(1, 65535),
    default=None,
    help="Redis port of the pods (default: policy redis.port, 6379).",
)
@click.option("--password-env", default=None, help="Env var holding the Redis password.")
@click.option(
    "--password-file",
    default=None,
    type=click.Path(dir_okay=False),
    help="File holding the Redis password.",
)
@output_option
@collector_paused()  # one run, then exit: no cycles worth a walk of every pod
def command(
    file: str | None,
    policy_path: str | None,
    context: str | None,
    kubeconfig: str | None,
    allow_empty: bool,
    namespace: str | None,
    plan_path: str | None,
    fail_specs: tuple[str, ...],
    level: str | None,
    roles_from: str,
    redis_port: int | None,
    password_env: str | None,
    password_file: str | None,
    output: str,
) -> None:
    """Simulate losing topology domains: masters lost, majority kept, promotions, shards down.

    Exit 1 when a drilled failure loses a shard or some Redis cluster's master majority.
    """
    adapter = None
    if roles_from == "redis" and file is None:
        # Live: the pods' Secrets give the password and TLS material, as for rebalance, read
        # through the adapter the snapshot was read with.
        policy, snapshot, adapter = load_live_inputs(
            policy_path, context, kubeconfig, allow_empty, namespace=namespace
        )
    else:
        policy, snapshot = load_inputs(
            file, policy_path, context, kubeconfig, allow_empty, namespace=namespace
        )
    offsets: dict[str, int] | None = None
    slots: dict[str, int] | None = None
    unread: list[SkippedInput] = []
    if roles_from == "redis":
        snapshot, offsets, slots, unread = _redis_facts(
            snapshot, policy, adapter, redis_port, password_env, password_file
        )
    plan, plan_warnings = (
        read_plan(plan_path, snapshot, namespace) if plan_path is not None else (None, [])
    )
    checked: Level | None = None
    if fail_specs:
        outages = parse_failures(fail_specs, snapshot)
    else:
        survive = policy.rules.survive
        checked = cast(Level, level or (survive if survive != "none" else "zone"))
        outages = every_domain(snapshot, plan, checked)
    report = drill(snapshot, outages, plan, offsets=offsets, slots=slots, roles=roles_from)
    report = report.model_copy(
        update={
            "skipped": [*report.skipped, *unread],
            "warnings": [*plan_warnings, *master_quorum_warnings(snapshot, policy)],
            "unlabelled": unlabelled_nodes(snapshot, plan, checked) if checked else [],
        }
    )
    nothing = nothing_drilled(report, plan, checked)
    if nothing and not allow_empty and not has_errors(report.skipped):
        # With input errors the report goes on: it shows what was left to drill, and why.
        fail(f"nothing to drill: {nothing}; {ALLOW}")
    _emit(report, snapshot, plan, output, checked)
    lost = any(f.loses_data_or_majority for f in report.failures)
    code = exit_code(skipped=report.skipped, unplaced=False, hard=lost)
    finish(report.skipped, report.warnings, code)
