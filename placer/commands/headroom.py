"""``redis-placer headroom``: how many more shards of one shape fit, proven by the solver."""

import time
from collections.abc import Callable

import click

from models.errors import InputError
from models.headroom import CapacityBound, Headroom, ShardShape
from models.policy import Policy
from models.quantity import QuantityError, cpu_millis, memory_bytes, non_negative
from models.resources import Resources
from models.snapshot import Snapshot
from models.words import plural, verb
from placer.commands.options import (
    DUMP_EPILOG,
    StderrProgress,
    deadline_of,
    exit_code,
    finish,
    input_issues,
    load_inputs,
    time_limit_option,
    with_source,
)
from placer.output import render
from solver.headroom import headroom
from solver.solve import SolveOptions
from solver.survival import survival_after

NEW_CLUSTER = "default/headroom"


def _bytes(n: int) -> str:
    """A byte count in the largest binary unit that divides it (1Gi, 1536Mi)."""
    for unit, size in (("Ti", 2**40), ("Gi", 2**30), ("Mi", 2**20), ("Ki", 2**10)):
        if n and n % size == 0:
            return f"{n // size}{unit}"
    return str(n)


def _request(flag: str, value: str | None, amount: Callable[[object], int]) -> int | None:
    """A request flag's amount, or None when not given. Read as the snapshot reads a pod's
    requests (models.quantity): what the API server would refuse, a negative quantity
    included, is refused here too, naming the flag."""
    if value is None:
        return None
    try:
        non_negative(value)
        return amount(value)
    except QuantityError as exc:
        raise InputError(str(exc), obj=flag) from None


def build_shape(
    snapshot: Snapshot,
    size: int,
    cpu: str | None,
    memory: str | None,
    cluster: str | None,
) -> ShardShape:
    """The shape asked for; an existing ``--cluster`` lends its pods' requests and constraints."""
    name = cluster or NEW_CLUSTER
    namespace, sep, label = name.partition("/")
    if not sep or not namespace or not label or "/" in label:
        raise InputError("must be NAMESPACE/NAME", obj="--cluster", field=name)
    template = next((m.pod for m in snapshot.members if m.cluster == name), None)
    cpu_m = _request("--cpu", cpu, cpu_millis)
    memory_b = _request("--memory", memory, memory_bytes)
    if template is None and (cpu_m is None or memory_b is None):
        raise InputError(
            f"Redis cluster {name} is not in the input: give --cpu and --memory "
            "(or name an existing cluster to copy its pods' requests)",
            obj="--cluster" if cluster else "--cpu/--memory",
        )
    requests = template.requests if template is not None else Resources()
    return ShardShape(
        size=size,
        requests=Resources(
            cpu=cpu_m if cpu_m is not None else requests.cpu,
            memory=memory_b if memory_b is not None else requests.memory,
            pods=1,
        ),
        cluster=name,
        tolerations=template.tolerations if template else (),
        node_selector=template.node_selector if template else {},
        affinity_terms=template.affinity_terms if template else (),
    )


def _headline(answer: Headroom) -> str:
    """How many more shards fit; with none, that no shard of the shape fits at all."""
    shape = (
        f"{answer.shard_size} x ({answer.cpu_millis}m cpu, {_bytes(answer.memory_bytes)} memory)"
    )
    if answer.shards == 0:
        return f"headroom: no shard of {shape} fits for Redis cluster {answer.cluster}"
    count = plural(answer.shards, "more shard")
    return f"headroom: {count} of {shape} for Redis cluster {answer.cluster}"


def _proof(answer: Headroom, policy: Policy) -> str:
    """The status line: what is proven, and the solve that proved it (none when a capacity
    bound is 0: nothing was offered to the solver)."""
    bound = answer.bound
    fit = "none fits" if bound == 0 else f"no more than {bound} {verb(bound, 'fits', 'fit')}"
    proof = (
        f"proven: {fit}"
        if answer.status == "OPTIMAL"
        else f"at least {answer.shards}, at most {answer.bound}"
    )
    solved = (
        f"{plural(answer.candidates, 'candidate shard')} solved in {answer.solve_seconds:.2f}s"
        if answer.candidates
        else "no solve: a capacity bound is 0"
    )
    return f"status {answer.status} ({proof}); survive: {policy.rules.survive}; {solved}"


def _bound_row(bound: CapacityBound) -> list[str]:
    """A table row; a resource the shape does not request bounds nothing, and says so."""
    shards = "unbounded (not requested)" if bound.shards is None else str(bound.shards)
    return [bound.limit, shards, ", ".join(bound.where) or "-"]


def headroom_text(answer: Headroom, policy: Policy) -> str:
    lines = [_headline(answer), _proof(answer, policy), f"limited by: {answer.limited_by}"]
    if answer.note:
        lines.append(f"note: {answer.note}")
    lines.extend(f"survival: {line}" for line in answer.survival)
    if answer.pending_ignored:
        lines.append(
            f"left out: {plural(len(answer.pending_ignored), 'pending pod')} of the input "
            "(headroom is counted on top of the running pods)"
        )
    bounds = render.table(["BOUND", "SHARDS", "WHERE"], [_bound_row(b) for b in answer.bounds])
    parts = ["\n".join(lines), "capacity bounds:\n" + bounds]
    if answer.explanation:
        parts.append("why not more:\n" + "\n".join(f"  {e}" for e in answer.explanation[:5]))
    note = render.input_note(answer.skipped)
    return "\n\n".join(parts) + (f"\n{note}" if note else "")


@click.command(
    "headroom", short_help="Count how many more shards of a shape fit.", epilog=DUMP_EPILOG
)
@with_source
@click.option(
    "--shard-size",
    type=click.IntRange(min=1),
    required=True,
    help="Members per shard (master and replicas).",
)
@click.option("--cpu", default=None, help="CPU request of each member (e.g. 500m).")
@click.option("--memory", default=None, help="Memory request of each member (e.g. 4Gi).")
@click.option(
    "--cluster",
    default=None,
    metavar="NS/NAME",
    help=f"Redis cluster the shards join; an existing one lends its pods' requests, "
    f"tolerations and node selectors (default: a new cluster {NEW_CLUSTER}).",
)
@click.option(
    "-o",
    "--output",
    type=click.Choice(["table", "json", "yaml"]),
    default="table",
    show_default=True,
    help="table: the count, what binds it and the capacity bounds; json or yaml: the same as "
    "a document.",
)
@time_limit_option()
def command(
    file: str | None,
    policy_path: str | None,
    context: str | None,
    kubeconfig: str | None,
    allow_empty: bool,
    shard_size: int,
    cpu: str | None,
    memory: str | None,
    cluster: str | None,
    output: str,
    time_limit: float | None,
) -> None:
    """Count how many more shards of this shape fit, with every hard rule kept.

    The count is proven by the solver (survive included) and comes with the resource or rule
    that binds first, and whether the cluster, so grown, could survive one domain's loss.
    """
    started = time.monotonic()
    # The nodes are what headroom judges: a cluster that runs no Redis pod yet is its question.
    policy, snapshot = load_inputs(
        file, policy_path, context, kubeconfig, allow_empty, need_pods=False
    )
    shape = build_shape(snapshot, shard_size, cpu, memory, cluster)
    with StderrProgress(started) as progress:
        deadline = deadline_of(started, time_limit, policy, snapshot)
        answer = headroom(
            snapshot, policy, shape, SolveOptions(deadline=deadline, progress=progress)
        )
    survival = survival_after(snapshot, policy, shape.cluster, answer.shards, shard_size)
    answer = answer.model_copy(update={"skipped": input_issues(snapshot), "survival": survival})
    if output == "table":
        click.echo(headroom_text(answer, policy))
    else:
        click.echo(render.document(answer.to_json_dict(), output))
    finish(answer.skipped, [], exit_code(skipped=answer.skipped, unplaced=False, hard=False))
