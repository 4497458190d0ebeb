"""``redis-placer maintenance check|prepare``: before a person drains nodes or a zone, what would be
lost, what is handed over and in what order; then the handovers themselves.

Like a Redis Enterprise node's maintenance mode: check the quorum first, demote the node's
masters, and only then let the node go. ``check`` changes nothing. ``prepare`` cordons the nodes
(so nothing new lands there and no restore hands a role back) and hands each master over, one
shard at a time, with ``CLUSTER FAILOVER`` (no data moves, no acknowledged write lost); it refuses,
changing nothing, when a shard or a master majority would be lost.
"""

from __future__ import annotations

import logging
from typing import Any

import click

from models.errors import InputError
from models.maintenance import node_going
from placer.commands.options import context_option, fail, kubeconfig_option
from placer.inputs.files import read_policy
from placer.output import render

EXIT_NOT_SAFE = 1


def make_adapter(kubeconfig: str | None, context: str | None) -> Any:
    """The live cluster's adapter (a seam for tests, as rebalance has)."""
    from placer.inputs.live import LIVE_ONLY, connect

    return connect(kubeconfig, context, instead=LIVE_ONLY)


def _nodes(view: Any, names: tuple[str, ...], zones: tuple[str, ...]) -> list[str]:
    known = {n.name: n for n in view.snapshot.nodes}
    for name in names:
        if name not in known:
            raise InputError(f"node {name}: no such node in the cluster")
    chosen = set(names)
    for zone in zones:
        inside = [n.name for n in known.values() if n.zone == zone]
        if not inside:
            raise InputError(f"--zone {zone}: no node carries that zone label")
        chosen.update(inside)
    if not chosen:
        raise InputError("name the nodes (NODE...) or a zone (--zone) to maintain")
    return sorted(chosen)


def _document(plan: Any, view: Any) -> dict[str, Any]:
    node_of = {m.key: m.pod.node_name for m in view.snapshot.members}
    return {
        "nodes": list(plan.nodes),
        "safe": plan.safe,
        "summary": plan.summary(),
        "handovers": [
            {
                "order": i + 1,
                "shard": h.shard,
                "from": h.pod,
                "fromNode": node_of.get(h.pod),
                "to": h.successor.pod if h.successor else None,
                "toNode": node_of.get(h.successor.pod) if h.successor else None,
                "brokenAfter": list(h.successor.broken) if h.successor else [],
            }
            for i, h in enumerate(plan.handovers)
        ],
        "replicasStopping": plan.replicas,
        "lost": plan.lost,
        "waiting": [{"pod": w.pod, "reason": w.reason} for w in plan.waits],
        "survivalWhileAway": [
            {"level": v.level, "survives": v.survived, "takes": len(v.takes)} for v in plan.verdicts
        ],
        "unreachable": list(view.unreachable),
    }


def _table(doc: dict[str, Any]) -> str:
    lines = [f"maintenance of {len(doc['nodes'])} node(s): {doc['summary']}"]
    if doc["handovers"]:
        lines.append("hand over first, in this order:")
        for h in doc["handovers"]:
            after = f"  (after it, a {' or '.join(h['brokenAfter'])} loss still takes something)"
            lines.append(
                f"  {h['order']}. {h['from']} ({h['fromNode']}) -> {h['to']} ({h['toNode']})"
                + (after if h["brokenAfter"] else "")
            )
    if doc["replicasStopping"]:
        lines.append(f"replicas that stop: {', '.join(doc['replicasStopping'])}")
    for line in doc["lost"]:
        lines.append(f"would be lost: {line}")
    for w in doc["waiting"]:
        lines.append(f"waits: {w['pod']}: {w['reason']}")
    for v in doc["survivalWhileAway"]:
        word = "yes" if v["survives"] else f"NO ({v['takes']} domain(s) would take something)"
        lines.append(f"while away, survives losing a {v['level']}: {word}")
    if doc["unreachable"]:
        lines.append(
            f"Redis did not answer (counted as not serving): {', '.join(doc['unreachable'])}"
        )
    return "\n".join(lines)


def _run(
    nodes: tuple[str, ...],
    zones: tuple[str, ...],
    policy_path: str | None,
    context: str | None,
    kubeconfig: str | None,
    redis_port: int | None,
    output: str,
    prepare: bool,
    cordon: bool,
) -> None:
    from placer.maintenance.guard import Guard
    from placer.maintenance.reading import read_guard_view
    from solver.handover import plan_maintenance

    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(message)s")
    policy = read_policy(policy_path)
    adapter = make_adapter(kubeconfig, context)
    port = redis_port or policy.redis.port
    view = read_guard_view(adapter, policy, port=port)
    for problem in view.problems:
        click.echo(f"warning: {problem}", err=True)
    names = _nodes(view, nodes, zones)
    plan = plan_maintenance(view.snapshot, policy, names, view.health)
    doc = _document(plan, view)
    if not prepare or not plan.safe:
        click.echo(_table(doc) if output == "table" else render.document(doc, output))
        if prepare:
            click.echo("nothing was changed", err=True)
        raise SystemExit(0 if plan.safe else EXIT_NOT_SAFE)
    done: list[str] = []
    if cordon:
        for name in names:
            node = view.snapshot.node_by_name[name]
            if not node_going(node):
                adapter.cordon_node(name)
                done.append(f"cordoned {name}")
    guard = Guard(adapter, policy, port=port, restore=False)
    for step in plan.handovers:
        assert step.successor is not None
        current = guard.current(0.0) or view
        master = next(m for m in current.snapshot.members if m.key == step.pod)
        successor = next(m for m in current.snapshot.members if m.key == step.successor.pod)
        done.append(guard.fail_over(current, master, successor, "maintenance prepare"))
    doc["done"] = done
    click.echo(
        _table(doc) + "\n" + "\n".join(done) if output == "table" else render.document(doc, output)
    )
    failed = [d for d in done if d.startswith("failed")]
    raise SystemExit(EXIT_NOT_SAFE if failed else 0)


_node_args = click.argument("nodes", nargs=-1, metavar="[NODE]...")
_zone_option = click.option(
    "--zone", "zones", multiple=True, metavar="ZONE", help="Every node of this zone (repeatable)."
)
_policy_option = click.option(
    "-p",
    "--policy",
    "policy_path",
    type=click.Path(dir_okay=False),
    metavar="FILE",
    help="Policy YAML (defaults without).",
)
_port_option = click.option(
    "--redis-port",
    type=int,
    default=None,
    help="Redis port of the pods (default: policy redis.port).",
)
_output_option = click.option(
    "-o",
    "--output",
    type=click.Choice(["table", "json", "yaml"]),
    default="table",
    show_default=True,
    help="table for a person; json or yaml for a program.",
)


@click.group("maintenance", short_help="Check and prepare nodes or a zone for a drain.")
def command() -> None:
    """Before draining nodes or a zone: whether it is safe, and the master handovers first."""


def _common(fn: Any) -> Any:
    """The nodes and the options ``check`` and ``prepare`` share."""
    for option in reversed(
        (
            _node_args,
            _zone_option,
            _policy_option,
            context_option,
            kubeconfig_option,
            _port_option,
            _output_option,
        )
    ):
        fn = option(fn)
    return fn


@command.command("check")
@_common
def check(
    nodes: tuple[str, ...],
    zones: tuple[str, ...],
    policy_path: str | None,
    context: str | None,
    kubeconfig: str | None,
    redis_port: int | None,
    output: str,
) -> None:
    """Say what draining NODE... (or --zone) would do: masters handed over, in order, replicas
    stopped, anything lost. Changes nothing. Exit 0 safe, 1 not safe (or not yet), 2 bad input."""
    try:
        _run(nodes, zones, policy_path, context, kubeconfig, redis_port, output, False, False)
    except InputError as exc:
        fail(str(exc))


@command.command("prepare")
@_common
@click.option(
    "--cordon/--no-cordon",
    default=True,
    show_default=True,
    help="Cordon the nodes first, so no pod lands there and no restore hands a role back.",
)
def prepare(
    nodes: tuple[str, ...],
    zones: tuple[str, ...],
    policy_path: str | None,
    context: str | None,
    kubeconfig: str | None,
    redis_port: int | None,
    output: str,
    cordon: bool,
) -> None:
    """Cordon NODE... (or --zone) and hand each master there over to a replica elsewhere, one
    shard at a time; refuse, changing nothing, when a shard or a master majority would be lost."""
    try:
        _run(nodes, zones, policy_path, context, kubeconfig, redis_port, output, True, cordon)
    except InputError as exc:
        fail(str(exc))


__all__ = ["command"]
