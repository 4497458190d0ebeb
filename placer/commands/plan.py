"""``redis-placer plan``: solve the placement of the pending pods and print the plan."""

import time
from typing import cast

import click

from models.plan import Mode
from placer import command_started
from placer.commands.options import (
    DUMP_EPILOG,
    StderrProgress,
    completed,
    deadline_of,
    emit,
    finish,
    load_inputs,
    output_option,
    overrun,
    plan_exit_code,
    time_limit_option,
    with_source,
)
from solver.changes import guarded_plan
from solver.solve import SolveOptions, solve


@click.command("plan", short_help="Place the pending pods and print the plan.", epilog=DUMP_EPILOG)
@with_source
@click.option(
    "--mode",
    type=click.Choice(["place", "rebalance"]),
    default="place",
    show_default=True,
    help="place: running pods stay, pending pods are placed. rebalance: running pods may move and masters may fail over.",
)
@output_option
@time_limit_option()
@click.option(
    "--workers",
    type=click.IntRange(min=0, max=256),
    default=None,
    help="CP-SAT search workers (policy solver.workers; 0: one, with a deterministic budget).",
)
@click.option(
    "--seed",
    type=click.IntRange(min=0, max=2**31 - 1),
    default=None,
    help="CP-SAT's random seed (policy solver.seed, 0 by default): the same seed, input and policy give the same plan.",
)
def command(
    file: str | None,
    policy_path: str | None,
    context: str | None,
    kubeconfig: str | None,
    allow_empty: bool,
    mode: str,
    output: str,
    time_limit: float | None,
    workers: int | None,
    seed: int | None,
) -> None:
    """Solve the placement and print the plan (within --time-limit, reading included)."""
    started = command_started()
    policy, snapshot = load_inputs(file, policy_path, context, kubeconfig, allow_empty)
    read = time.monotonic()
    deadline = deadline_of(started, time_limit, policy, snapshot)
    if mode == "rebalance":
        # guarded_plan judges the plan again as rebalance carries it out: about 35
        # microseconds a member, pod and node, twice with the standing violations.
        items = len(snapshot.members) + len(snapshot.other_pods) + len(snapshot.nodes)
        deadline -= 0.05 + 2 * 35e-6 * items
    with StderrProgress(started) as progress:
        result = solve(
            snapshot,
            policy,
            cast(Mode, mode),
            SolveOptions(
                deadline=deadline,
                workers=workers,
                seed=seed,
                progress=progress,
            ),
        )
    if mode == "rebalance":
        # As `rebalance` would carry it out: a moved master is failed over first.
        result = guarded_plan(snapshot, policy, result)
    result = completed(snapshot, policy, result, judged=mode == "place")
    emit(result, snapshot, output)
    late = overrun(started, read, time_limit, policy)
    finish(result.skipped, [*result.warnings, *late], plan_exit_code(result))
